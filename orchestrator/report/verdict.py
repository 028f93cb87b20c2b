"""What a study's report adds up to for the command line, as an outcome (console.py): the summary, the gate
applied, the exit status (docs/conventions.md): 130 when an arm was interrupted, else 4 when an arm failed,
else 3 when a gate failed, else 0. Used by `run` and by `compare`, which re-makes the reports of recorded runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.analysis.gate import failures, gate_from_flags
from orchestrator.analysis.results import Comparison
from orchestrator.config.catalog import line
from orchestrator.console import Outcome, answer, note
from orchestrator.errors import ConfigError, ExitStatus, RecordError
from orchestrator.record.paths import RunPaths, read_json
from orchestrator.report import aiperf_export, onset
from orchestrator.report.build import read_sources, rebuild
from orchestrator.report.markdown import cells_table
from orchestrator.report.model import StudyReport
from orchestrator.report.sweep import done_line, is_sweep_dir, summarize


def gate_outcome(comparison: Comparison, gate: dict[str, Any]) -> Outcome:
    """A `gate:` line per failed expectation (exit 3), or nothing."""
    problems = failures(comparison, gate)
    return note(*(f"gate: {problem}" for problem in problems),
                status=ExitStatus.GATE_FAILED if problems else ExitStatus.OK)


def cells_summary(paths: RunPaths, report: StudyReport) -> Outcome:
    """The cells table and where the report and the record are."""
    record = paths.data if paths.data.is_dir() else "the data/ of each run compared"  # compare RUN... --out DIR
    return answer(cells_table(report.comparison), f"\nReport: {paths.report_md}\nRecord: {record}")


def verdict(report: StudyReport, gate: dict[str, Any]) -> Outcome:
    """The gate's lines, and the arms that failed or were stopped, with the status by precedence: 130 when an
    arm was interrupted (Ctrl-C, SIGTERM), else 4 when an arm failed (the measurement failed), else 3 when the
    gate failed, else 0."""
    outcome = gate_outcome(report.comparison, gate)
    stopped = [f.arm for f in report.failures if f.status == "interrupted"]
    failed = [f for f in report.failures if f.status != "interrupted"]
    if failed:  # where and why, as report.md's Failures section says it
        outcome += note(f"error: arm(s) failed: {', '.join(f.arm for f in failed)}",
                        *(f"error: arm '{f.arm}': root cause, from its log: {f.cause}" for f in failed if f.cause),
                        status=ExitStatus.MEASUREMENT_FAILED)
    if stopped:  # not a failure of the engine: the rest is still to send
        return outcome + note(f"interrupted: arm(s) {', '.join(stopped)} stopped by Ctrl-C or SIGTERM before they "
                              "finished", *(f"interrupted: {sentence}" for sentence in report.incomplete),
                              status=ExitStatus.INTERRUPTED)
    if failed:
        return outcome
    return outcome + note(*(f"error: {sentence}" for sentence in report.incomplete),
                          status=ExitStatus.MEASUREMENT_FAILED if report.incomplete else ExitStatus.OK)


def _recompare_sweep(sweep_dir: Path, with_options: bool, gate_job: Callable[[Path], Outcome] | None) -> Outcome:
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
    jobs = [gate_job(sweep_dir / job) for job in summary["jobs"]] if gate_job else []
    return sum(jobs, Outcome()) + answer(done_line(sweep_dir, summary))


def recompare(run_dirs: list[Path], out: Path | None, baseline: str | None, as_json: bool, run_gate: bool,
              max_divergence_rate: float | None, expect_pairs: list[str], expect_schedules: list[str],
              branches: int | None = None, export: str | None = None) -> Outcome:
    """The `compare` verb: the reports again from the record, the gate asked for, the run's exit status; with
    `export` ("aiperf"), the load phases as AIPerf's profile export beside the reports."""
    if max_divergence_rate is not None and not 0 <= max_divergence_rate <= 1:
        raise ConfigError(line("range", "--max-divergence-rate", max_divergence_rate, "in [0, 1]",
                               "give a rate, e.g. 0.05 for 5 %"))
    if branches is not None and branches < 1:
        raise ConfigError(line("range", "--branches", branches, ">= 1", "show at least one branch, e.g. 4"))
    asked = run_gate or max_divergence_rate is not None or bool(expect_pairs or expect_schedules)
    if export and len(run_dirs) == 1 and ((run_dirs[0] / onset.FILE).is_file() or is_sweep_dir(run_dirs[0])):
        raise ConfigError(f"--export {export}: {run_dirs[0]} is a sweep; export one of its job dirs (SWEEP_DIR/N), "
                          "each a run")
    if len(run_dirs) == 1 and (run_dirs[0] / onset.FILE).is_file():  # an onset search's own report, not a sweep's
        if out is not None or baseline is not None or asked:
            raise ConfigError(f"{run_dirs[0]} is an onset search: compare takes no --out, --baseline or gate for "
                              "it; pass one of its job dirs (SWEEP_DIR/N) for those")
        return answer(*onset.remade(run_dirs[0]))
    if len(run_dirs) == 1 and is_sweep_dir(run_dirs[0]):
        return _recompare_sweep(run_dirs[0], out is not None or baseline is not None, (lambda job: recompare(
            [job], None, None, as_json, run_gate, max_divergence_rate, expect_pairs, expect_schedules, branches))
            if asked else None)
    runs = read_sources(run_dirs)  # each read once, handed on
    exported = aiperf_export.load_phases([run.paths for run in runs]) if export else None  # before any report
    gate = gate_from_flags(runs[0].meta.gate if run_gate else None, max_divergence_rate, expect_pairs,
                           expect_schedules)
    if len(runs) == 1 and runs[0].starts:  # an arm the run lacks is bad input, not a gate
        arms = sorted({arm.arm for arm in runs[0].starts})
        unknown = [line("unknown-name", f"--expect-{key.removeprefix('expect_').rstrip('s')}", arm, arms)
                   for key in ("expect_pairs", "expect_schedules") for arm in gate.get(key, {}) if arm not in arms]
        if unknown:
            raise ConfigError(unknown)
    # the reports state the gate this compare applies; asked for none, the run's own, as the run wrote them
    paths, report = rebuild(runs, out, baseline, branches, gate if asked else None)
    shown = answer(paths.report_json.read_text().removesuffix("\n")) if as_json else cells_summary(paths, report)
    if exported is not None:
        shown += note(aiperf_export.write(exported, paths.root / "aiperf"))
    return shown + verdict(report, gate)
