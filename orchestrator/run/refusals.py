"""Every refusal of a study, in one place: `check` and `run` (and `run --from`, `run --resume`, `reproduce`)
call `refusals`, so whatever `run` refuses, `check` refuses with the same line. Nothing is written: a run
dir is made only once they all passed.

In order, every problem collected (one line each, exit 2): the command line and the config (config/compose.py,
config/validate.py), the guard's declared checks (guard/declared.py), a process arm's missing program, the
run dir, ports, disk, the Docker host and where the arms fit on it (run/placement.py), the images (present or
buildable), then the knobs each engine knows (its listing runs in a throwaway container, no network).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from orchestrator.config import engine_rules, prefix_flush
from orchestrator.config.arms import ResolvedArm, missing_executables, resolve_arms, runtime_for
from orchestrator.config.catalog import line
from orchestrator.config.compose import compose_collecting, typed_collecting
from orchestrator.config.schema import Config
from orchestrator.config.security import OWN_CONFIG_ALLOW
from orchestrator.config.validate import runtime_kind_problems, validate
from orchestrator.engines import ENGINES
from orchestrator.errors import DockerUnavailable, ImageError
from orchestrator.guard import declared as guard_declared
from orchestrator.guard import knobs as guard_knobs
from orchestrator.guard.results import KnobCheck
from orchestrator.report.table import size
from orchestrator.run import placement
from orchestrator.run.send import digests, protocol
from orchestrator.run.timings import StageTimer
from orchestrator.runtime.spec import Runtime
from orchestrator.runtime.traits import traits_of

BYTES_PER_LOGPROB = 48  # a top-logprob entry in the responses table and its raw JSON, measured on the record
BYTES_PER_REQUEST = 4096  # body, headers, metadata


def run_dir_problems(composed: DictConfig, multirun: bool) -> list[str]:
    """The run dir (Hydra's run or sweep dir) must be creatable: its nearest existing folder writable."""
    return new_run_dir_problems(*run_dir_of(composed, multirun))


# What a run (run.json, data/) or a sweep (multirun.yaml) leaves in its dir.
RUN_MARKERS = ("run.json", "data", "multirun.yaml")


def new_run_dir_problems(field: str, dir_text: str) -> list[str]:
    """A run dir (`field` names where it was given) must be creatable: its nearest existing folder writable,
    and itself holding no run yet."""
    static = Path(dir_text.split("${", 1)[0] or ".")
    held = [m for m in RUN_MARKERS if (static / m).exists()] if "${" not in dir_text else []
    given = f"{field}{' ' if field.startswith('--') else '='}"  # --out DIR, hydra.run.dir=DIR
    if held:
        resume = "" if held[0] == "multirun.yaml" else f", or finish that run: orchestrator run --resume {dir_text}"
        return [line("run-dir-used", field, dir_text, f"a dir that holds no run yet (it has {held[0]}: a second "
                     "run would mix its record into that one's)", f"pass {given}A_NEW_DIR{resume}")]
    existing = next(p for p in [static, *static.absolute().parents] if p.exists())
    try:  # try it: permission bits do not tell (root, read-only mounts, /proc)
        os.rmdir(tempfile.mkdtemp(prefix=".orchestrator-check-", dir=existing))
    except OSError as exc:
        return [line("run-dir", field, dir_text, f"a folder this user can create ({existing}: "
                     f"{exc.strerror})", f"pass {given}SOMEWHERE_WRITABLE")]
    return []


def _run_dir_text(composed: DictConfig, multirun: bool) -> str:
    """hydra.run.dir (or sweep.dir) as written, before its ${now:...} parts are filled in."""
    node = OmegaConf.to_container(composed.hydra["sweep" if multirun else "run"], resolve=False)
    assert isinstance(node, dict)
    return str(node["dir"])


def expected_record_bytes(typed: Config) -> int:
    requests = len(typed.arms) * protocol.requests_per_arm(typed.protocol, len(typed.prompts.prompts))
    request = typed.protocol.request
    logprobs = max(request.logprobs or 0, 1)
    return requests * (BYTES_PER_REQUEST + request.max_tokens * logprobs * BYTES_PER_LOGPROB)


def disk_problems(typed: Config, where: Path) -> list[str]:
    existing = next(p for p in [where, *where.absolute().parents] if p.exists())
    free, needed = shutil.disk_usage(existing).free, 2 * expected_record_bytes(typed)
    if free >= needed:
        return []
    return [line("disk", "free disk", f"{size(free)} at {existing}", f"at least {size(needed)} "
                 "(twice the expected record)", "free space, or pass hydra.run.dir=ELSEWHERE")]


def port_problems(typed: Config) -> list[str]:
    """Arms that listen on a fixed host port (host networking; a process arm without port args)."""
    found = []
    for name, arm in typed.arms.items():
        own_network = traits_of(typed.runtime.kind).isolates_filesystem
        fixed = arm.network_host or (not own_network and not arm.process_port_args)
        if not fixed:
            continue
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", arm.port)) == 0:
                found.append(line("port", f"arms.{name}.port", arm.port, "a free port on 127.0.0.1",
                                  "stop what listens there, or set another port"))
    return found


@dataclass(frozen=True)
class ConfigCheck:
    """What `config_check` found: the problems, and each arm resolved (none where an arm names an unknown
    engine: there is no profile to resolve it with)."""

    problems: list[str]
    arms: dict[str, ResolvedArm]


def config_check(typed: Config, allow: list[str] | None = None, how_to_allow: str = OWN_CONFIG_ALLOW
                 ) -> ConfigCheck:
    """Validate, resolve each arm once (config/arms.py), then what reads the resolved arms: the engines' own
    rules on the protocol's requests (and the digests each phase flags), the guard's (a confounded or
    mis-declared A/B, a hidden shared cache) and a process arm's missing program."""
    found = validate(typed, allow, how_to_allow)
    if any(arm.engine not in ENGINES for arm in typed.arms.values()) or runtime_kind_problems(typed):
        return ConfigCheck(found, {})  # nothing to resolve an arm with
    arms = resolve_arms(typed)
    return ConfigCheck(found or [*engine_rules.problems(typed, arms), *prefix_flush.problems(typed, arms),
                                 *digests.capacity_problems(typed, arms),
                                 *guard_declared.problems(typed, arms), *missing_executables(arms)], arms)


def missing_images(arms: dict[str, ResolvedArm], runtime: Runtime) -> list[str]:
    """Every arm whose image is neither present nor buildable, with how to get it: before any arm starts
    (an arm's own Docker host, in a sweep of many hosts, is checked when the arm runs)."""
    problems = []
    for name, resolved in arms.items():
        arm, build = resolved.arm, resolved.build
        if arm.docker_host is not None:
            continue
        if resolved.on_host and build.interpreter.startswith("/") and not Path(build.interpreter).exists():
            continue  # no interpreter to identify the code with: missing_executables says so, with how to get it
        try:
            runtime.resolve_image(arm.image, build)
        except ImageError as exc:
            problems.append(f"arm '{name}': {str(exc).splitlines()[0]}"
                            + (f" For this arm: {arm.build.hint}." if arm.build.hint else ""))
    return problems


@dataclass
class Refusals:
    """What `refusals` found: the problems (none: the study may start), the runtime it checked against, the
    knobs each arm's engine knows (kept in guard.json), and the arms as resolved (config/arms.py)."""

    problems: list[str]
    runtime: Runtime | None = None
    knobs: dict[str, KnobCheck] = field(default_factory=dict)
    arms: dict[str, ResolvedArm] = field(default_factory=dict)


def refusals(typed: Config, found: list[str], run_id: str, run_dir: tuple[str, str] | None = None,
             allow: list[str] | None = None, how_to_allow: str = OWN_CONFIG_ALLOW,
             timer: StageTimer | None = None) -> Refusals:
    """Every check before anything starts, in order, the problems collected; writes nothing. `found`: the
    problems composing and typing the config found already (config/compose.py); `run_dir`: (the field that
    names it, the dir as given) for a run dir still to be made; `run_id` labels the knob listing's containers."""
    timer = timer or StageTimer()
    with timer.stage("checks"):
        checked = config_check(typed, allow, how_to_allow)
        own, arms = checked.problems, checked.arms
        problems = [*found, *own]
        if run_dir is not None:
            problems += new_run_dir_problems(*run_dir)
        problems += port_problems(typed)
        if not problems and run_dir is not None:
            problems += disk_problems(typed, Path(run_dir[1].split("${", 1)[0] or "."))
        try:
            runtime = runtime_for(typed.runtime)
        except DockerUnavailable as exc:  # nothing can start: refused like any other problem
            return Refusals([*problems, str(exc)])
        if not own:  # placement reads the fields the config's checks vouch for (gpus, parallel_arms)
            problems += placement.problems(typed, lambda host: runtime_for(
                typed.runtime, None if host == placement.LOCAL else host).inventory(), arms)
    with timer.stage("images"):
        images = missing_images(arms, runtime)
    problems += images
    knobs: dict[str, KnobCheck] = {}
    if not images and arms:  # each arm resolved: what the listing needs
        with timer.stage("knobs"):
            knobs = guard_knobs.check_knobs(typed, runtime, run_id, arms)
        problems += guard_knobs.knob_refusal(typed, knobs, arms)
        derived = guard_declared.caused_by_typos(typed, arms, guard_knobs.typo_arms(typed, knobs))
        problems = [problem for problem in problems if problem not in derived]  # a typo's line stands alone
    return Refusals(problems, runtime, knobs, arms)


def study_config(overrides: list[str], dirs: list[Path]) -> tuple[DictConfig, Config, list[str]]:
    """(the composed config, its typed tree, the problems composing and typing found) of `check`'s and
    `run`'s overrides: every command-line problem, not only the first."""
    composed, found = compose_collecting(overrides, dirs)
    typed, more = typed_collecting(composed)
    return composed, typed, [*found, *more]


def run_dir_of(composed: DictConfig, multirun: bool) -> tuple[str, str]:
    """(the field, the dir as written) of Hydra's run dir (or sweep dir), for `refusals`."""
    return f"hydra.{'sweep' if multirun else 'run'}.dir", _run_dir_text(composed, multirun)
