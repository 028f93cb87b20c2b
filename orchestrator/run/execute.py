"""What the `run` verb calls (and `reproduce`, for the re-run): checks, the arms, the reports of one study into
one run dir, and its summary and exit status as an outcome (console.py). A warning that must be seen before the
arms start is said when it is found."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.config import prefix_flush, resolve_prompts, workload
from orchestrator.config.arms import ResolvedArm
from orchestrator.config.schema import Config
from orchestrator.config.security import OWN_CONFIG_ALLOW
from orchestrator.console import Outcome, note
from orchestrator.errors import ConfigError, ExitStatus
from orchestrator.guard import declared as guard_declared
from orchestrator.guard import knobs as guard_knobs
from orchestrator.guard import observed as guard_observed
from orchestrator.guard import versions as guard_versions
from orchestrator.guard.results import GuardResult, KnobCheck
from orchestrator.record.paths import RunPaths, atomic_write_bytes, atomic_write_text, read_json
from orchestrator.run.arm.launch import ResumePlan
from orchestrator.run.refusals import Refusals, config_check, refusals
from orchestrator.run.send import protocol
from orchestrator.run.study import StudyRunner
from orchestrator.run.timings import StageTimer
from orchestrator.runtime.reaper import Reaper
from orchestrator.runtime.traits import traits_of


def record_config(paths: RunPaths, typed: Config) -> None:
    """RUN/.hydra as Hydra leaves it for a run (config.yaml, overrides.yaml), for a run Hydra did not start
    (`run --from`, `reproduce`): the config as it ran, so the new dir re-runs, resumes and reproduces too."""
    from omegaconf import OmegaConf

    paths.hydra.mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.hydra / "config.yaml", OmegaConf.to_yaml(OmegaConf.structured(typed)))
    atomic_write_text(paths.hydra / "overrides.yaml", "[]\n")


def preflight(typed: Config, allow: list[str] | None = None, how_to_allow: str = OWN_CONFIG_ALLOW
              ) -> dict[str, ResolvedArm]:
    """The config's problems (run/refusals.py `config_check`), all at once (exit 2); else each arm resolved."""
    checked = config_check(typed, allow, how_to_allow)
    if checked.problems:
        raise ConfigError(checked.problems)
    return checked.arms


def execute_study(typed: Config, paths: RunPaths, allow: list[str], how_to_allow: str,
                  extra_meta: dict[str, Any] | None = None, timer: StageTimer | None = None,
                  resume: ResumePlan | None = None, checked: Refusals | None = None) -> Outcome:
    """Checks, the run, the reports, the summary: shared by `run` (Hydra), `reproduce` and `run --resume`
    (`resume`: into the same run dir, only what it names). `timer` may hold the stages before this one;
    `checked`: what the checks found already (`run` makes them before Hydra makes the run dir)."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the progress
    timer = timer or StageTimer()
    recorded = read_json(paths.meta) if resume is not None else None
    if recorded is not None and resume is not None:  # one attempt more: its containers get a run id of their own
        run_id = f"{recorded['run_id']}-r{resume.attempt}"
    else:
        run_id = f"{re.sub(r'[^A-Za-z0-9_.-]', '-', paths.root.name)}-{secrets.token_hex(3)}"
    try:  # every refusal, as `check` makes them (run/refusals.py); writes nothing
        checked = checked or refusals(typed, [], run_id, allow=allow, how_to_allow=how_to_allow, timer=timer)
        if checked.problems:
            raise ConfigError(checked.problems)
    except BaseException:  # refused, or stopped while checking: a sweep job's dir Hydra made for it goes too
        if hydras_only(paths.root):
            shutil.rmtree(paths.root, ignore_errors=True)
        raise
    assert checked.runtime is not None
    runtime, knobs = checked.runtime, checked.knobs
    paths.root.mkdir(parents=True, exist_ok=True)
    if typed.private_files:  # Hydra made the run dir already: close it, then keep what comes private
        os.umask(0o077)
        paths.root.chmod(0o700)
    # Outlives us: removes this run's containers and processes if we die without cleaning up (kill -9).
    others = [*(arm.docker_host for arm in typed.arms.values() if arm.docker_host),
              *(host for host in typed.runtime.hosts if host != "local")]
    many = traits_of(typed.runtime.kind).ships_images  # only such a runtime runs arms on other hosts
    runtimes = {(typed.runtime.kind, host) for host in [typed.runtime.docker_host, *(others if many else [])]}
    reaper = Reaper(run_id, runtimes, str(paths.reaper_log))
    runner = StudyRunner(typed, paths, run_id, runtime, resume=resume, arms=checked.arms, timer=timer)
    try:
        meta, guard = _record_start(typed, checked.arms, paths, run_id, knobs, extra_meta, recorded, resume)
        runner.run()
    except KeyboardInterrupt as exc:  # what was received is kept: say how to finish it
        if paths.meta.is_file():
            mark_interrupted(paths)
            exc.add_note(f"what it received is kept; `orchestrator run --resume {paths.root}` sends the rest")
        raise
    finally:
        runner.cleanup()  # belt and braces: nothing of this run survives, on any host it used
        reaper.release()
    # The report's modules were imported while the first engine loaded (run/prefetch.py), not at start-up.
    from orchestrator.record.recorded import Recorded, RunMeta, read_run
    from orchestrator.report import verdict
    from orchestrator.report.build import build as build_reports
    from orchestrator.report.guard import headline as guard_headline
    from orchestrator.report.markdown import timings_line

    with timer.stage("guard"):
        guard_observed.after_run(typed, run := read_run(paths, meta), guard)  # the run read once, for the report too
    outcome = note(f"guard: {guard_headline(guard).replace('**', '')}")
    with timer.stage("report"):
        report = build_reports(Recorded.of([run], meta=RunMeta.of({**meta, "timings_s": timer.rounded()})))  # + own
    meta["timings_s"] = timer.rounded()
    atomic_write_text(paths.meta, json.dumps(meta, indent=2) + "\n")
    outcome += note(f"time: {timings_line(meta['timings_s'], report.waves)}")
    outcome += verdict.cells_summary(paths, report) + verdict.verdict(report, meta["gate"])
    if runner.failed and outcome.status != ExitStatus.MEASUREMENT_FAILED:  # failed, though the record says otherwise
        outcome += note(f"error: arm(s) failed: {', '.join(runner.failed)} (see {paths.report_md})",
                        status=ExitStatus.MEASUREMENT_FAILED)
    return outcome


# What Hydra's run_job writes into a job's dir before the study's code runs (besides the job's log).
HYDRA_FILES = frozenset({"config.yaml", "hydra.yaml", "overrides.yaml"})


def hydras_only(root: Path) -> bool:
    """The dir holds only what Hydra made for a job (.hydra/ and its log): no run's file, nobody else's."""
    hydra = root / ".hydra"
    if not hydra.is_dir() or not {p.name for p in hydra.iterdir()} <= HYDRA_FILES:
        return False
    return all(entry == hydra or (entry.suffix == ".log" and entry.is_file()) for entry in root.iterdir())


def mark_interrupted(paths: RunPaths) -> None:
    """run.json's `interrupted`: when Ctrl-C or SIGTERM stopped the run (`ls` and `show` say so; a resume that
    starts clears it)."""
    meta = read_json(paths.meta)
    meta["interrupted"] = datetime.now(UTC).isoformat(timespec="seconds")
    atomic_write_text(paths.meta, json.dumps(meta, indent=2) + "\n")


def _record_start(typed: Config, arms: dict[str, ResolvedArm], paths: RunPaths, run_id: str,
                  knobs: dict[str, KnobCheck], extra_meta: dict[str, Any] | None, meta: dict[str, Any] | None,
                  resume: ResumePlan | None) -> tuple[dict[str, Any], GuardResult]:
    """What a run dir holds once the study is cleared to start: run.json, prompts.json, .hydra (a re-run's),
    guard.json with the declared check and the knobs. Returns run.json's content and the guard so far."""
    if resume is not None and meta is not None:
        meta["resumed"] = [*meta.get("resumed", []), resume.attempt]
        meta.pop("interrupted", None)  # being finished now; marked again if stopped again
    else:
        meta = {"study": typed.study.name, "run_id": run_id, "baseline": typed.baseline_arm,
                "control": typed.study.control,
                "expectations": expectations(typed), "gate": dataclasses.asdict(typed.gate),
                "config_dirs": keep_config_dirs(paths, typed.config_dirs),
                "expected_requests_per_arm": expected_requests(typed), "planned_arms": list(typed.arms),
                "sample_size": protocol.sample_size(typed.protocol, len(typed.prompts.prompts)),
                "near_tie_gap": typed.study.near_tie_gap, **({"rescore": True} if typed.protocol.rescore else {}),
                "explorer_branches": typed.study.explorer_branches, "host": socket.gethostname(),
                "started": datetime.now(UTC).isoformat(timespec="seconds"), **(extra_meta or {})}
    atomic_write_text(paths.meta, json.dumps(meta, indent=2) + "\n")
    write_prompts(paths, resolve_prompts(typed.prompts, typed.config_dirs))
    if not (paths.hydra / "config.yaml").is_file():  # a re-run: Hydra did not record it, so record it here
        record_config(paths, typed)
    declared = guard_declared.declared_check(typed, arms)  # before anything starts (docs/guard.md)
    guard = GuardResult(declared=declared, knobs=knobs)
    guard_observed.write(paths, guard)
    for line in [*guard_declared.warnings(declared), *guard_knobs.warnings(knobs), *workload.warnings(typed),
                 *prefix_flush.warnings(typed, arms),
                 *(issue.line for issue in guard_versions.check_notes(typed, knobs))]:  # as `check` warns
        print(f"warning: {line}", file=sys.stderr)
    return meta, guard


def keep_config_dirs(paths: RunPaths, dirs: list[str]) -> list[dict[str, Any]]:
    """Copy the user's config files (small: YAML and text) into RUN/config-dirs/N and record each one's
    sha256, so the run dir shows what its study was composed from without the folders it came from."""
    kept = []
    for index, folder in enumerate(map(Path, dirs)):
        files = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".txt")
                           and p.stat().st_size <= 1 << 20):
            data = path.read_bytes()
            relative = path.relative_to(folder).as_posix()
            atomic_write_bytes(paths.root / "config-dirs" / str(index) / relative, data)
            files[relative] = hashlib.sha256(data).hexdigest()
        kept.append({"dir": str(folder), "copy": f"config-dirs/{index}", "sha256": files})
    return kept


def write_prompts(paths: RunPaths, texts: dict[str, str]) -> None:
    """RUN/prompts.json: what was sent, by content (`run --from` and `reproduce` read it back)."""
    record = {prompt_id: {"text": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}
              for prompt_id, text in texts.items()}
    atomic_write_text(paths.prompts_json, json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def expected_requests(typed: Config) -> int:
    """How many requests the protocol sends each arm: what a complete record holds (`run --resume`)."""
    return protocol.requests_per_arm(typed.protocol, len(typed.prompts.prompts))


def expectations(typed: Config) -> dict[str, dict[str, Any]]:
    """Prompt id -> its quality expectation (set fields only), kept in run.json for `compare`."""
    out = {}
    for prompt_id, prompt in typed.prompts.prompts.items():
        expect = {k: v for k, v in dataclasses.asdict(prompt.expect).items() if v is not None and k != "min_share"}
        if expect:
            out[prompt_id] = {**expect, "min_share": prompt.expect.min_share}
    return out
