"""The `check` verb: everything that can be checked without starting an arm, each a line, exit 0 or 2.

The config (config/validate.py) and the guard's declared checks (guard/declared.py, guard/caches.py), as
`run` makes them; then the images (present or buildable), the knobs each engine knows (its listing runs in a
throwaway container, no network), the ports arms listen on themselves, the run dir and the disk space the
record will take.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from orchestrator import config
from orchestrator.config.catalog import line
from orchestrator.config.schema import Config, RuntimeKind
from orchestrator.errors import ConfigError, ExitStatus
from orchestrator.guard import declared as guard_declared
from orchestrator.guard import knobs as guard_knobs
from orchestrator.run.execute import expected_requests, missing_images, preflight

BYTES_PER_LOGPROB = 48  # a top-logprob entry in the responses table and its raw JSON, measured on the record
BYTES_PER_REQUEST = 4096  # body, headers, metadata


def run_dir_problems(composed: DictConfig, multirun: bool) -> list[str]:
    """The run dir (Hydra's run or sweep dir) must be creatable: its nearest existing folder writable."""
    key = "sweep" if multirun else "run"
    return new_run_dir_problems(f"hydra.{key}.dir", _run_dir_text(composed, multirun))


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
    requests = len(typed.arms) * expected_requests(typed)
    request = typed.protocol.request
    logprobs = max(request.logprobs or 0, 1)
    return requests * (BYTES_PER_REQUEST + request.max_tokens * logprobs * BYTES_PER_LOGPROB)


def disk_problems(typed: Config, where: Path) -> list[str]:
    existing = next(p for p in [where, *where.absolute().parents] if p.exists())
    free, needed = shutil.disk_usage(existing).free, 2 * expected_record_bytes(typed)
    if free >= needed:
        return []
    return [line("disk", "free disk", f"{free >> 20} MiB at {existing}", f"at least {needed >> 20} MiB "
                 "(twice the expected record)", "free space, or pass hydra.run.dir=ELSEWHERE")]


def port_problems(typed: Config) -> list[str]:
    """Arms that listen on a fixed host port (host networking; a process arm without port args)."""
    found = []
    for name, arm in typed.arms.items():
        fixed = arm.network_host or (typed.runtime.kind is RuntimeKind.process and not arm.process_port_args)
        if not fixed:
            continue
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", arm.port)) == 0:
                found.append(line("port", f"arms.{name}.port", arm.port, "a free port on 127.0.0.1",
                                  "stop what listens there, or set another port"))
    return found


def check(argv: list[str]) -> int:
    """`orchestrator check [--config-dir DIR] [OVERRIDES]`: every check, the problems at once; 0 or 2."""
    from orchestrator.config.arms import runtime_for
    from orchestrator.config.search import split_config_dirs

    dirs, overrides = split_config_dirs(argv)
    multirun = any(o in ("-m", "--multirun") for o in overrides)
    composed = config.compose([o for o in overrides if o not in ("-m", "--multirun")], dirs)
    typed = config.to_typed(composed)
    preflight(typed)
    print(f"ok config: study {typed.study.name}, {len(typed.arms)} arm(s), protocol {typed.protocol.name}, "
          f"{len(typed.prompts.prompts)} prompt(s); guard: declared variables and caches")
    for warning in guard_declared.warnings(guard_declared.declared_check(typed)):  # as `run` says them
        print(f"warning: {warning}", file=sys.stderr)
    problems = run_dir_problems(composed, multirun) + port_problems(typed)
    if not problems:
        problems += disk_problems(typed, Path(_run_dir_text(composed, multirun).split("${", 1)[0] or "."))
    runtime = runtime_for(typed.runtime)
    problems += missing_images(typed, runtime)
    if not problems:
        print(f"ok images, ports, run dir, disk (record about {expected_record_bytes(typed) >> 20} MiB)")
        knobs = guard_knobs.check_knobs(typed, runtime, "check")
        problems += guard_knobs.knob_refusal(typed, knobs)
        if not problems:
            print("ok knobs: " + "; ".join(f"{arm}: {k.flags_known} flags, {k.env_known} env names known"
                                            if k.checked else f"{arm}: not checked ({k.reason})"
                                            for arm, k in knobs.items()))
    if problems:
        raise ConfigError(problems)
    print("check passed: nothing was started", file=sys.stderr)
    return ExitStatus.OK
