"""Re-run a finished run from its own record, with its images pinned by id, and say whether it
reproduced: cell by cell, the new signatures against the original ones.

The run dir's config is someone else's input: it is validated against the schema, nothing in it is
instantiated or executed on the host, and its dangerous container options need `--allow KIND` here
(its own runtime.allow does not count).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from orchestrator import config
from orchestrator.analysis.positions import first_difference
from orchestrator.config.arms import resolve_arms, runtime_for
from orchestrator.config.schema import BuildConfig, Config
from orchestrator.config.validate import validate
from orchestrator.console import Outcome, answer
from orchestrator.errors import ConfigError, ExitStatus, ImageError, RecordError, counted
from orchestrator.record.identity import CODE
from orchestrator.record.paths import RunPaths, atomic_write_text, read_json
from orchestrator.record.recorded import Identity, RecordedRun, read_run
from orchestrator.record.tables import read_table
from orchestrator.reproduce.bundle import opened
from orchestrator.runtime.spec import BuildSpec

REPRODUCE_ALLOW = "--allow {kind} to `orchestrator reproduce`"
# Hydra's overrides that say only where a run is written: a re-run takes them, as `run` does.
OUTPUT_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")
_COLUMNS = ["arm", "prompt_id", "phase", "cold", "error", "sig_top_logprobs", "sig_text", "token_ids"]


def refused_overrides(hydra_dir: Path) -> ConfigError:
    """A recorded run re-runs as it was: only where it is written may change (OUTPUT_KEYS, --out)."""
    return ConfigError(f"{hydra_dir} is a recorded run: it re-runs as it was (no -m, no overrides but where it is "
                       f"written: {', '.join(OUTPUT_KEYS)}); to change it, copy {hydra_dir / 'config.yaml'} into a "
                       "config dir of your own")


def load_config(original: RunPaths, allow: list[str], how_to_allow: str) -> Config:
    """The study a run dir recorded, validated as someone else's input (its own runtime.allow replaced by
    `allow`), its prompts by content (RUN/prompts.json): it re-runs without the config dirs, prompt files or
    working directory it came from. A config that does not validate is refused naming the file."""
    saved = original.hydra / "config.yaml"
    if not original.root.exists():
        raise RecordError(f"{original.root} does not exist: pass a run dir that `orchestrator run` wrote "
                          "(`orchestrator ls` lists them)")
    if not saved.is_file():
        raise RecordError(f"{original.root} has no .hydra/config.yaml: not a run directory of `orchestrator run`")
    try:
        recorded_config = OmegaConf.load(saved)
    except Exception as exc:  # YAML's and OmegaConf's errors: a damaged file either way
        raise RecordError(f"{saved} cannot be read ({' '.join(str(exc).split())}): the run dir is damaged; "
                          "copy it again from its source") from None
    try:
        typed = config.to_typed(recorded_config)  # type: ignore[arg-type]
        if original.prompts_json.is_file():
            recorded = read_json(original.prompts_json)
            for prompt_id, prompt in typed.prompts.prompts.items():
                if prompt_id in recorded:
                    typed.prompts.prompts[prompt_id] = dataclasses.replace(
                        prompt, text=recorded[prompt_id]["text"], file=None, repeat_to_chars=None)
            typed.config_dirs = []
        # unpacked from a bundle: each arm built from the context it holds; arms that shared one context share
        # the first one's copy, so the guard sees no difference between them that the run did not have
        bundled: dict[str | None, str] = {}
        for name, arm in typed.arms.items():
            if original.bundle_context(name).is_dir():
                context = bundled.setdefault(arm.build.context, str(original.bundle_context(name)))
                typed.arms[name] = dataclasses.replace(arm, build=dataclasses.replace(arm.build, context=context))
        if problems := validate(typed, allow, how_to_allow):
            raise ConfigError(problems)
    except ConfigError as exc:
        raise ConfigError([f"{saved}: {problem}" for problem in exc.problems]) from None
    return typed


def pin_images(typed: Config, original: RecordedRun) -> dict[str, Identity]:
    """Each arm (or the stand-in) on the exact image id the original run used; no builds."""
    used = {arm.arm: arm for arm in original.starts}  # an arm's last start, as the table holds them
    pinned = {}
    for name, arm in typed.arms.items():
        identity = used[name].identity if name in used else None
        if identity is None:
            raise RecordError(f"the original run has no image id for arm '{name}' (did it fail before starting?)")
        pinned[name] = identity
        if typed.stand_in:
            typed.stand_in = str(identity)
        else:
            # a process arm keeps its source folder: it is part of the code identity being checked
            build = arm.build if identity.kind == CODE else BuildConfig()
            typed.arms[name] = dataclasses.replace(arm, image=str(identity), build=build)
    return pinned


def check_images_present(typed: Config, pinned: dict[str, Identity], original: RecordedRun) -> None:
    runtime, arms = runtime_for(typed.runtime), resolve_arms(typed)
    refs = {arm.arm: arm.image_ref for arm in original.starts}
    for name, identity in pinned.items():
        process = identity.kind == CODE
        try:
            runtime.resolve_image(str(identity), arms[name].build if process else BuildSpec())
        except ImageError as exc:
            if process:  # a local process: what is installed differs
                raise ImageError(f"arm '{name}': {exc}") from None
            raise ImageError(f"arm '{name}': the original image {identity} ({refs.get(name)}) is not on this Docker "
                             "engine. Load it (docker save on the original machine, docker load here), or pass "
                             "--by-tag to re-run against the tag and compare anyway") from None


def _cells(paths: RunPaths) -> dict[tuple[str, str, str], dict[str, Any]]:
    cells: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in read_table(paths, "responses", columns=_COLUMNS).to_pylist():
        if row["cold"] or row["error"] is not None:
            continue
        cell = cells.setdefault((row["arm"], row["prompt_id"], row["phase"]), {"sigs": Counter(), "tokens": None})
        cell["sigs"][row["sig_top_logprobs"] or row["sig_text"]] += 1
        if cell["tokens"] is None and row["token_ids"] is not None:
            cell["tokens"] = row["token_ids"]
    return cells


def verdicts(original: RunPaths, new: RunPaths) -> list[dict[str, Any]]:
    before, after = _cells(original), _cells(new)
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        entry: dict[str, Any] = {"arm": key[0], "prompt_id": key[1], "phase": key[2]}
        if a is None or b is None:
            entry.update(verdict="missing", detail="cell only in the " + ("new" if a is None else "original") + " run")
        elif set(a["sigs"]) == set(b["sigs"]) and len(a["sigs"]) == 1:
            entry.update(verdict="reproduced", detail=f"1 signature in {sum(a['sigs'].values())} and "
                                                      f"{sum(b['sigs'].values())}")
        else:
            seen = sum(n for sig, n in b["sigs"].items() if sig in a["sigs"])
            where = None
            if a["tokens"] is not None and b["tokens"] is not None:
                import numpy as np

                where = first_difference(np.array(a["tokens"]), np.array(b["tokens"]))
            entry.update(verdict="differs", first_differing_token=where,
                         detail=f"original {len(a['sigs'])} distinct in {sum(a['sigs'].values())}, new "
                                f"{len(b['sigs'])} in {sum(b['sigs'].values())}; {seen} of the new responses match "
                                "an original signature")
        out.append(entry)
    return out


def output_overrides(original: RunPaths, overrides: list[str]) -> list[str]:
    """The overrides of a re-run, refused unless they only say where output goes (OUTPUT_KEYS)."""
    if any(arg.split("=", 1)[0] not in OUTPUT_KEYS or "=" not in arg for arg in overrides):
        raise refused_overrides(original.hydra)
    return overrides


def output_dir(output: list[str], out: Path | None, study: str) -> Path | None:
    """Where the re-run is written: --out, or the output overrides as Hydra would read them:
    hydra.run.dir, else a sweep's job dir, hydra.sweep.dir/hydra.sweep.subdir (a re-run is job 0).
    None: neither given."""
    if out is not None and output:
        raise ConfigError(f"--out {out} and {output[0]} both name the new run dir: keep one")
    if not output:
        return out
    dirs = _hydra_dirs(study, output)
    if any(arg.startswith("hydra.run.dir=") for arg in output):
        return Path(dirs["run"]["dir"])
    return Path(dirs["sweep"]["dir"], dirs["sweep"]["subdir"])


def default_run_dir(study: str) -> Path:
    """Where `run` puts a study: conf/config.yaml's hydra.run.dir."""
    return Path(_hydra_dirs(study, [])["run"]["dir"])


def _hydra_dirs(study: str, output: list[str]) -> dict[str, dict[str, str]]:
    """The project's hydra.run and hydra.sweep (conf/config.yaml) with the overrides applied, resolved."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's resolvers: ${now:...}
    hydra = OmegaConf.to_container(OmegaConf.load(config.CONF_DIR / f"{config.CONFIG_NAME}.yaml").hydra)
    assert isinstance(hydra, dict)
    node = OmegaConf.create({"study": {"name": study}, "hydra": {"run": {"dir": hydra["run"]["dir"]}, "sweep": {
        "dir": hydra["sweep"]["dir"], "subdir": hydra["sweep"]["subdir"]}, "job": {"num": 0}}})
    for arg in output:
        try:
            override = OverridesParser.create().parse_override(arg)
        except Exception as exc:  # Hydra's grammar errors
            raise ConfigError(f"{arg}: {' '.join(str(exc).split())}") from None
        if override.is_sweep_override():
            raise ConfigError(f"{arg}: a re-run is one run, written to one dir: give one value")
        OmegaConf.update(node, override.key_or_group, override.value())
    try:
        resolved = OmegaConf.to_container(node, resolve=True)
    except Exception as exc:  # an interpolation that names nothing, or a resolver Hydra does not have
        raise ConfigError(f"{' '.join(output)}: {' '.join(str(exc).split())}") from None
    assert isinstance(resolved, dict)
    return {key: {k: str(v) for k, v in value.items()} for key, value in resolved["hydra"].items() if key != "job"}


def default_out(original: RunPaths, sent: Path) -> Path:
    """Beside what was sent (the run dir, or the bundle), never inside it: it stays as it came."""
    return sent.parent / f"{original.root.name}-reproduce-{datetime.now():%Y-%m-%d_%H-%M-%S}"


def write_verdict(new: RunPaths, original: RunPaths, cells: list[dict[str, Any]]) -> bool:
    reproduced = bool(cells) and all(c["verdict"] == "reproduced" for c in cells)
    atomic_write_text(new.root / "reproduce.json", json.dumps(
        {"original": str(original.root), "reproduced": reproduced, "cells": cells}, indent=2) + "\n")
    return reproduced


def new_run(output: list[str], out: Path | None, study: str, default: Path) -> RunPaths:
    """The re-run's dir (output_dir, else `default`), refused when it cannot be created."""
    from orchestrator.run.refusals import new_run_dir_problems

    where = output_dir(output, out, study) or default
    if problems := new_run_dir_problems(output[0].split("=", 1)[0] if output else "--out", str(where)):
        raise ConfigError(problems)
    return RunPaths(where)


def run_from(run_dir: Path, out: Path | None, allow: list[str], output: list[str] | None = None) -> Outcome:
    """`orchestrator run --from RUN_DIR`: the recorded study again, by image tag, into a new run dir (`out`,
    or `output`: Hydra's output overrides, any other refused; by default where `run` puts the study)."""
    from orchestrator.run.execute import execute_study

    run_dir, sent = opened(run_dir)
    original = RunPaths(run_dir)
    output = output_overrides(original, output or [])
    how_to_allow = REPRODUCE_ALLOW.replace("reproduce", "run --from")
    typed = load_config(original, allow, how_to_allow)
    new = new_run(output, out, typed.study.name, default_run_dir(typed.study.name))
    print(f"running the study recorded in {original.root} into {new.root}", file=sys.stderr)  # before it starts
    return execute_study(typed, new, allow, how_to_allow, extra_meta={"from": str(sent or original.root)})


def reproduce(run_dir: Path, out: Path | None, allow: list[str], by_tag: bool,
              output: list[str] | None = None) -> Outcome:
    """`orchestrator reproduce`: the re-run, a verdict line per cell, then the overall verdict."""
    from orchestrator.run.execute import execute_study

    run_dir, sent = opened(run_dir)
    original = RunPaths(run_dir)
    output = output_overrides(original, output or [])
    typed = load_config(original, allow, REPRODUCE_ALLOW)
    if not by_tag:
        recorded = read_run(original)
        check_images_present(typed, pin_images(typed, recorded), recorded)
    new = new_run(output, out, typed.study.name, default_out(original, sent or original.root))
    outcome = execute_study(typed, new, allow, REPRODUCE_ALLOW, extra_meta={"reproduces": str(sent or original.root)})
    cells = verdicts(original, new)
    outcome += answer(*(f"{cell['verdict']:10s} {cell['arm']}/{cell['prompt_id']}/{cell['phase']}: {cell['detail']}"
                        + (f", first differing token {cell['first_differing_token']}"
                           if cell.get("first_differing_token") is not None else "") for cell in cells))
    if write_verdict(new, original, cells):
        return outcome + answer(f"verdict: reproduced ({counted(len(cells), 'cell')})")
    differing = sum(c["verdict"] == "differs" for c in cells)
    missing = sum(c["verdict"] == "missing" for c in cells)
    not_run = f"; {missing} not re-run" if missing else ""
    if differing:  # the re-run ran, and answered otherwise
        return outcome + answer(f"verdict: differs ({differing} of {len(cells)} cells{not_run})",
                                status=ExitStatus.GATE_FAILED)
    return outcome + answer(f"verdict: not reproduced: the re-run did not answer ({missing} of {len(cells)} cells "
                            "not re-run)", status=ExitStatus.MEASUREMENT_FAILED)
