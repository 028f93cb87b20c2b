"""Reports a person reads (report.md, report.html with plots) and a machine reads (report.json),
made from the record alone."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from orchestrator.analysis.attribution import attribute
from orchestrator.analysis.compare import NEAR_TIE_GAP, arm_engines, arms_summary, compare
from orchestrator.analysis.cost import cost
from orchestrator.analysis.explorer import MAX_BRANCHES
from orchestrator.analysis.failures import ArmFailure, arm_failures
from orchestrator.analysis.results import Comparison, WaveTime
from orchestrator.config.catalog import line
from orchestrator.errors import ConfigError, RecordError
from orchestrator.guard.observed import read as read_guard
from orchestrator.record.paths import RunPaths, atomic_write_text, read_json
from orchestrator.record.tables import read_table
from orchestrator.report import headline
from orchestrator.report.environment import environment
from orchestrator.report.headline import gate_verdict, sentences
from orchestrator.report.html import to_html
from orchestrator.report.markdown import front, markdown
from orchestrator.report.model import StudyReport


def build(paths: RunPaths, study: str, run_id: str, baseline: str | None,
          expectations: dict[str, Any] | None = None, sources: list[RunPaths] | None = None,
          arm_pairs: list[tuple[str, str]] | None = None, sweep: dict[str, Any] | None = None,
          gate: dict[str, Any] | None = None, near_tie_gap: float = NEAR_TIE_GAP, host: str | None = None,
          expected_requests_per_arm: int | None = None, timings_s: dict[str, float] | None = None,
          planned_arms: list[str] | None = None, explorer_branches: int = MAX_BRANCHES,
          sample_size: dict[str, Any] | None = None, **_: Any) -> StudyReport:
    """Write the reports into `paths` from the record of `sources` (default: the same run)."""
    records = sources or [paths]
    stop_after = (sample_size or {}).get("stop_after_divergences")
    comparison = compare(records, baseline, expectations, near_tie_gap, arm_pairs=arm_pairs,
                         branches=explorer_branches, stop_after_divergences=stop_after)
    failed = failures(records)
    missing = incomplete(records[0], expected_requests_per_arm, planned_arms, _not_sent(comparison, sample_size)) \
        if len(records) == 1 else []
    arms = arms_summary(records)
    probes = read_table(paths, "probes").to_pylist()  # recorded in this run dir (orchestrator probe --out RUN_DIR)
    why = {arm: profile.unobserved() for arm, (profile, _) in arm_engines(records).items()}
    report = StudyReport(study=study, run_id=run_id, baseline=baseline, arms=arms,
                         comparison=comparison, guard=read_guard(paths), sweep=sweep or None, failures=failed,
                         probes=probes, attribution=attribute(comparison, arms, probes),
                         headline=[*missing, *sentences(comparison, [f.arm for f in failed  # interrupted: in missing
                                                                     if f.status != "interrupted"], near_tie_gap,
                                             why),
                                   *headline.sample_size(comparison, sample_size)],
                         summary=headline.summary(comparison),
                         gate=gate_verdict(comparison, gate), environment=environment(records, paths, host),
                         timings_s=timings_s or {}, waves=wave_times(records), incomplete=missing, unobserved=why,
                         cost=cost(records, comparison, arm_pairs, [*([baseline] if baseline else []),
                                                                    *(planned_arms or [])]))
    shown = {**report.to_json(), "front": front(report)}  # report.md's first lines, for `show`
    atomic_write_text(paths.report_json, json.dumps(shown, indent=2, sort_keys=True, allow_nan=False) + "\n")
    atomic_write_text(paths.report_md, markdown(report))
    atomic_write_text(paths.report_html, to_html(report))
    return report


def wave_times(records: list[RunPaths]) -> list[WaveTime]:
    """Each wave of arms side by side (study.parallel_arms), timed from the arms table; [] when arms ran one
    by one (no wave recorded) or several runs are compared."""
    if len(records) != 1:
        return []
    waves: dict[int, list[dict[str, Any]]] = {}
    for row in read_table(records[0], "arms", ["arm", "wave", "start_ns", "stop_ns"]).to_pylist():
        if row["wave"] is not None and row["start_ns"] is not None and row["stop_ns"] is not None:
            waves.setdefault(row["wave"], []).append(row)
    return [WaveTime(number, [r["arm"] for r in rows],
                     (max(r["stop_ns"] for r in rows) - min(r["start_ns"] for r in rows)) / 1e9,
                     sum(r["stop_ns"] - r["start_ns"] for r in rows) / 1e9) for number, rows in sorted(waves.items())]


def _not_sent(comparison: Comparison, sample_size: dict[str, Any] | None) -> dict[str, int]:
    """Per arm, the requests the stop rule left unsent: each stopped cell's planned n less what it sent."""
    planned = (sample_size or {}).get("cell_requests") or {}
    out: dict[str, int] = {}
    for cell in comparison.cells:
        if cell.stopped_after is not None and cell.phase in planned:
            sent = cell.n + cell.errors + (cell.batches_kept_out or 0) * (cell.batch_size or 0)
            out[cell.arm] = out.get(cell.arm, 0) + max(0, planned[cell.phase] - sent)
    return out


def incomplete(paths: RunPaths, expected_per_arm: int | None, planned_arms: list[str] | None = None,
               not_sent: dict[str, int] | None = None) -> list[str]:
    """A sentence per arm that `run --resume` would finish: requests of the protocol without a row, or, for an
    arm that did not complete (interrupted, killed, engine lost), with an error row. `not_sent`: per arm, the
    requests the stop rule ended (never sent, so never a row)."""
    if not expected_per_arm:
        return []
    rows = read_table(paths, "responses", ["arm", "request_id", "error"]).to_pylist()  # latest attempts
    status = {r["arm"]: r["status"] for r in read_table(paths, "arms", ["arm", "status", "start"]).to_pylist()
              if not r["start"]}  # the start that ran the protocol (study.starts)
    found = []
    for arm in dict.fromkeys([*(planned_arms or []), *status, *(str(r["arm"]) for r in rows)]):
        mine = [r for r in rows if r["arm"] == arm and not _restart_cold(r["request_id"])]
        errors = sum(r["error"] is not None for r in mine) if status.get(arm) != "completed" else 0
        expected = expected_per_arm - (not_sent or {}).get(arm, 0)
        if len(mine) - errors < expected:
            # an arm that failed re-fails on resume unless its cause was passing (its failure says which)
            when = " once what failed it is fixed" if status.get(arm) == "failed" else ""
            found.append(f"INCOMPLETE: arm {arm} has {len(mine) - errors} of {expected} requests recorded"
                         f"{f' ({errors} more with an error row)' if errors else ''}: `orchestrator run --resume "
                         f"{paths.root}` sends the rest{when}")
    return found


def _restart_cold(request_id: str | None) -> bool:
    """A restarted arm's extra cold request (run/protocol.py `resent`): not one of the protocol's."""
    return bool(request_id) and str(request_id).rsplit("/", 1)[-1].startswith("-")


def failures(records: list[RunPaths]) -> list[ArmFailure]:
    """Every failed arm of the runs compared, named as the comparison names them."""
    if len(records) == 1:
        return arm_failures(records[0])
    return [dataclasses.replace(f, arm=f"{r.root.name}/{f.arm}") for r in records for f in arm_failures(r)]


def rebuild(run_dirs: list[Path], out: Path | None, baseline: str | None, branches: int | None = None,
            gate: dict[str, Any] | None = None) -> tuple[RunPaths, StudyReport, dict[str, Any]]:
    """`compare`: re-make the reports of one run, or of several compared as one study (arms named
    RUN_DIR_NAME/ARM, reports into `out`); `branches`: the explorer's, instead of the run's; `gate`: the gate
    the reports state, instead of the run's. Returns (where they went, the result, the run's meta)."""
    sources = [RunPaths(d) for d in run_dirs]
    for source in sources:
        if not source.meta.is_file():
            raise RecordError(f"{source.root} is not a run directory (no run.json): pass the folder "
                              "`orchestrator run` printed")
    metas = [read_json(s.meta) for s in sources]
    meta = metas[0]
    if len(sources) > 1:
        if out is None:
            raise ConfigError("comparing several runs needs --out DIR for the reports")
        expectations = {k: v for m in metas for k, v in (m.get("expectations") or {}).items()}
        meta = {**meta, "run_id": "+".join(m["run_id"] for m in metas), "expectations": expectations,
                "baseline": baseline or f"{sources[0].root.name}/{meta['baseline']}"}
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(RunPaths(out).meta, json.dumps({**meta, "sources": [str(s.root) for s in sources]},
                                                         indent=2) + "\n")
    elif baseline:
        meta = {**meta, "baseline": baseline}
    arms = [a if len(sources) == 1 else f"{s.root.name}/{a}" for s in sources
            for a in read_table(s, "arms", columns=["arm"]).column("arm").to_pylist()]
    if baseline is not None and baseline not in arms:
        raise ConfigError(line("unknown-name", "--baseline", baseline, arms))
    if branches is not None:
        meta = {**meta, "explorer_branches": branches}
    if gate is not None:
        meta = {**meta, "gate": gate}
    paths = RunPaths(out) if out else sources[0]
    return paths, build(paths, **meta, sources=sources), meta
