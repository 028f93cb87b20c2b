"""What a study's report adds up to for the command line: the summary printed, the gate applied, the exit
status (docs/conventions.md): 130 when an arm was interrupted, else 4 when an arm failed, else 3 when a gate
failed, else 0. Used by `run` and by `compare`, which re-makes the reports of recorded runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.analysis.gate import failures, gate_from_flags
from orchestrator.analysis.results import Comparison
from orchestrator.config.catalog import line
from orchestrator.errors import ConfigError, ExitStatus, RecordError, worst
from orchestrator.record.paths import RunPaths, read_json
from orchestrator.report.build import rebuild
from orchestrator.report.markdown import cells_table
from orchestrator.report.model import StudyReport
from orchestrator.report.sweep import done_line, is_sweep_dir, summarize


def gate_failed(comparison: Comparison, gate: dict[str, Any]) -> bool:
    problems = failures(comparison, gate)
    for problem in problems:
        print(f"gate: {problem}", file=sys.stderr)
    return bool(problems)


def print_summary(paths: RunPaths, report: StudyReport) -> None:
    print(cells_table(report.comparison))
    record = paths.data if paths.data.is_dir() else "the data/ of each run compared"  # compare RUN... --out DIR
    print(f"\nReport: {paths.report_md}\nRecord: {record}")


def status(report: StudyReport, gate: dict[str, Any]) -> ExitStatus:
    """130 when an arm was interrupted (Ctrl-C, SIGTERM), else 4 when an arm failed (the measurement failed),
    else 3 when the gate failed, else 0."""
    gate_status = ExitStatus.GATE_FAILED if gate_failed(report.comparison, gate) else ExitStatus.OK
    stopped = [f.arm for f in report.failures if f.status == "interrupted"]
    failed = [f for f in report.failures if f.status != "interrupted"]
    if failed:
        print(f"error: arm(s) failed: {', '.join(f.arm for f in failed)}", file=sys.stderr)
        for failure in failed:  # where and why, as report.md's Failures section says it
            if failure.cause:
                print(f"error: arm '{failure.arm}': root cause, from its log: {failure.cause}", file=sys.stderr)
    if stopped:  # not a failure of the engine: the rest is still to send
        print(f"interrupted: arm(s) {', '.join(stopped)} stopped by Ctrl-C or SIGTERM before they finished",
              file=sys.stderr)
        for sentence in report.incomplete:
            print(f"interrupted: {sentence}", file=sys.stderr)
        return ExitStatus.INTERRUPTED
    if failed:
        return ExitStatus.MEASUREMENT_FAILED
    for sentence in report.incomplete:
        print(f"error: {sentence}", file=sys.stderr)
    if report.incomplete:
        return ExitStatus.MEASUREMENT_FAILED
    return gate_status


def _recompare_sweep(sweep_dir: Path, with_options: bool, gate_job: Callable[[Path], int] | None) -> int:
    """`compare SWEEP_DIR`: the sweep's report again from its jobs' records (the jobs it had left out stay out);
    a gate asked for (`gate_job`) is applied to each job, as a sweep's run does, and the worst status wins."""
    if with_options:
        raise ConfigError(f"{sweep_dir} is a sweep: compare takes no --out or --baseline for it; pass one of "
                          "its job dirs (SWEEP_DIR/N) for those")
    saved = sweep_dir / "sweep.json"
    failed = (read_json(saved).get("failed_jobs") or {}) if saved.is_file() else {}
    summary = summarize(sweep_dir, failed)
    if not summary:
        raise RecordError(f"{sweep_dir} is a sweep dir, but none of its jobs holds a run (run.json)")
    statuses = [gate_job(sweep_dir / job) for job in summary["jobs"]] if gate_job else []
    print(done_line(sweep_dir, summary))
    return worst(*statuses)


def recompare(run_dirs: list[Path], out: Path | None, baseline: str | None, as_json: bool, run_gate: bool,
              max_divergence_rate: float | None, expect_pairs: list[str], expect_schedules: list[str],
              branches: int | None = None) -> int:
    """The `compare` verb: the reports again from the record, the gate asked for, the run's exit status."""
    if max_divergence_rate is not None and not 0 <= max_divergence_rate <= 1:
        raise ConfigError(line("range", "--max-divergence-rate", max_divergence_rate, "in [0, 1]",
                               "give a rate, e.g. 0.05 for 5 %"))
    if branches is not None and branches < 1:
        raise ConfigError(line("range", "--branches", branches, ">= 1", "show at least one branch, e.g. 4"))
    asked = run_gate or max_divergence_rate is not None or bool(expect_pairs or expect_schedules)
    if len(run_dirs) == 1 and is_sweep_dir(run_dirs[0]):
        return _recompare_sweep(run_dirs[0], out is not None or baseline is not None, (lambda job: recompare(
            [job], None, None, as_json, run_gate, max_divergence_rate, expect_pairs, expect_schedules, branches))
            if asked else None)
    source = RunPaths(run_dirs[0])  # no run.json: rebuild says so
    own = read_json(source.meta).get("gate") if run_gate and source.meta.is_file() else None
    gate = gate_from_flags(own, max_divergence_rate, expect_pairs, expect_schedules)
    # the reports state the gate this compare applies; asked for none, the run's own, as the run wrote them
    paths, report, _ = rebuild(run_dirs, out, baseline, branches, gate if asked else None)
    if as_json:
        print(paths.report_json.read_text(), end="")
    else:
        print_summary(paths, report)
    return int(status(report, gate))
