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
from orchestrator.analysis.cost_results import CostReport
from orchestrator.analysis.decode_prefill import decode_prefill
from orchestrator.analysis.explorer import MAX_BRANCHES
from orchestrator.analysis.failures import arm_failures
from orchestrator.analysis.prefix_served import prefix_served
from orchestrator.analysis.results import Comparison, WaveTime
from orchestrator.config.catalog import line
from orchestrator.errors import ConfigError, RecordError
from orchestrator.guard.observed import read as read_guard
from orchestrator.record.ledger import Reads
from orchestrator.record.paths import RunPaths, atomic_write_text
from orchestrator.record.recorded import ArmStart, Recorded, RecordedRun, RunMeta, read_run
from orchestrator.report import headline, side_effects_md
from orchestrator.report.environment import environment
from orchestrator.report.headline import gate_verdict, sentences
from orchestrator.report.html import to_html
from orchestrator.report.markdown import front, markdown
from orchestrator.report.model import StudyReport


def build(recorded: Recorded) -> StudyReport:
    """Write the reports into `recorded.out` from the record of its runs, as its meta says."""
    meta, runs, paths = recorded.meta, recorded.runs, recorded.out
    near_tie_gap = NEAR_TIE_GAP if meta.near_tie_gap is None else meta.near_tie_gap
    stop_after = (meta.sample_size or {}).get("stop_after_divergences")
    for run in runs:  # failures, cost and the rest read the responses' ledger after the comparison's pass
        run.reads.gather()
    comparison = compare(recorded, meta.baseline, meta.expectations, near_tie_gap, arm_pairs=meta.arm_pairs,
                         branches=MAX_BRANCHES if meta.explorer_branches is None else meta.explorer_branches,
                         stop_after_divergences=stop_after, control=meta.control)
    failed = [f for run in runs for f in arm_failures(run)]
    costs = cost(recorded, comparison, meta.arm_pairs, [*([meta.baseline] if meta.baseline else []),
                                                        *(meta.planned_arms or [])])
    missing = incomplete(runs[0], meta.expected_requests_per_arm, meta.planned_arms,
                         _not_sent(comparison, meta.sample_size, costs)) if len(runs) == 1 else []
    arms = arms_summary(recorded)
    own = _own(recorded)
    probes = own.table("probes").to_pylist()  # recorded in the run dir (orchestrator probe --out RUN_DIR)
    why = {arm: profile.unobserved() for arm, (profile, _) in arm_engines(recorded).items()}
    guard = read_guard(own.paths)
    report = StudyReport(study=meta.study, run_id=meta.run_id, baseline=meta.baseline, arms=arms,
                         comparison=comparison, guard=guard, sweep=meta.sweep or None, failures=failed,
                         probes=probes, attribution=attribute(comparison, arms, probes),
                         headline=[*filter(None, [meta.provenance]),  # an imported run: what its source lacks
                                   *missing, *sentences(comparison, [f.arm for f in failed  # interrupted: in missing
                                                                     if f.status != "interrupted"], near_tie_gap,
                                             why),
                                   *headline.sample_size(comparison, meta.sample_size)],
                         summary=headline.summary(comparison),
                         gate=gate_verdict(comparison, meta.gate), environment=environment(recorded),
                         timings_s=meta.timings_s or {}, waves=wave_times(recorded), incomplete=missing,
                         unobserved=why, cost=costs, decode_prefill=decode_prefill(recorded),
                         prefix_cache=prefix_served(recorded), side_effects=side_effects_md.audits(recorded, guard))
    shown = {**report.to_json(), "front": front(report)}  # report.md's first lines, for `show`
    atomic_write_text(paths.report_json, json.dumps(shown, indent=2, sort_keys=True, allow_nan=False) + "\n")
    atomic_write_text(paths.report_md, markdown(report))
    atomic_write_text(paths.report_html, to_html(report))
    return report


def wave_times(recorded: Recorded) -> list[WaveTime]:
    """Each wave of arms side by side (study.parallel_arms), timed from the arms table; [] when arms ran one
    by one (no wave recorded) or several runs are compared."""
    if len(recorded.runs) != 1:
        return []
    waves: dict[int, list[ArmStart]] = {}
    for arm in recorded.runs[0].starts:
        if arm.wave is not None and arm.start_ns is not None and arm.stop_ns is not None:
            waves.setdefault(arm.wave, []).append(arm)
    return [WaveTime(number, [a.arm for a in arms], (max(a.stop_ns or 0 for a in arms) -
                                                     min(a.start_ns or 0 for a in arms)) / 1e9,
                     sum((a.stop_ns or 0) - (a.start_ns or 0) for a in arms) / 1e9)
            for number, arms in sorted(waves.items())]


def _own(recorded: Recorded) -> Reads:
    """The dir whose guard.json and kernel probes the report states: one run's (read once already), wherever its
    reports go; several runs compared as one study: the dir their reports go to."""
    return recorded.runs[0].reads if len(recorded.runs) == 1 else Reads(recorded.out)


def _not_sent(comparison: Comparison, sample_size: dict[str, Any] | None, costs: CostReport) -> dict[str, int]:
    """Per arm, the requests the stop rules left unsent: each stopped cell's planned n less what it sent, and
    every request of a series' points after the one that over-saturated (load.series)."""
    planned = (sample_size or {}).get("cell_requests") or {}
    per_point = {name: s["point_requests"] for name, s in ((sample_size or {}).get("series") or {}).items()}
    out: dict[str, int] = {}
    for s in costs.saturation:
        if any(p.over_saturated for p in s.points):
            out[s.arm] = out.get(s.arm, 0) + (s.planned_points - len(s.points)) * per_point.get(s.phase, 0)
    for cell in comparison.cells:
        if cell.stopped_after is not None and cell.phase in planned:
            sent = cell.n + cell.errors + (cell.batches_kept_out or 0) * (cell.batch_size or 0)
            out[cell.arm] = out.get(cell.arm, 0) + max(0, planned[cell.phase] - sent)
    return out


def incomplete(run: RecordedRun, expected_per_arm: int | None, planned_arms: list[str] | None = None,
               not_sent: dict[str, int] | None = None) -> list[str]:
    """A sentence per arm that `run --resume` would finish: requests of the protocol without a row, or, for an
    arm that did not complete (interrupted, killed, engine lost), with an error row. `not_sent`: per arm, the
    requests the stop rule ended (never sent, so never a row)."""
    if not expected_per_arm:
        return []
    paths = run.paths
    rows = run.reads.ledger().select(["arm", "request_id", "error"]).to_pylist()  # latest attempts
    status = {arm.arm: arm.status for arm in run.arms}  # the start that ran the protocol (study.starts)
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
    """A restarted arm's extra cold request (run/send/protocol.py `resent`): not one of the protocol's."""
    return bool(request_id) and str(request_id).rsplit("/", 1)[-1].startswith("-")


def read_sources(run_dirs: list[Path]) -> list[RecordedRun]:
    """The run dirs `compare` names, each read once (run.json and the arms table)."""
    sources = [RunPaths(d) for d in run_dirs]
    for source in sources:
        if not source.meta.is_file():
            raise RecordError(f"{source.root} is not a run directory (no run.json): pass the folder "
                              "`orchestrator run` printed")
    return [read_run(s) for s in sources]


def rebuild(runs: list[RecordedRun], out: Path | None, baseline: str | None, branches: int | None = None,
            gate: dict[str, Any] | None = None) -> tuple[RunPaths, StudyReport]:
    """`compare`: re-make the reports of one run, or of several compared as one study (arms named
    RUN_DIR_NAME/ARM, reports into `out`); `branches`: the explorer's, instead of the run's; `gate`: the gate
    the reports state, instead of the run's. Returns where they went and the result."""
    metas = [run.meta.written for run in runs]
    meta = metas[0]
    if len(runs) > 1:
        if out is None:
            raise ConfigError("comparing several runs needs --out DIR for the reports")
        expectations = {k: v for m in metas for k, v in (m.get("expectations") or {}).items()}
        meta = {**meta, "run_id": "+".join(m["run_id"] for m in metas), "expectations": expectations,
                "baseline": baseline or f"{runs[0].paths.root.name}/{meta['baseline']}"}
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(RunPaths(out).meta, json.dumps({**meta, "sources": [str(r.paths.root) for r in runs]},
                                                         indent=2) + "\n")
    elif baseline:
        meta = {**meta, "baseline": baseline}
    recorded = Recorded.of(runs, RunPaths(out) if out else None)
    arms = [run.label + arm.arm for run in recorded.runs for arm in run.starts]
    if baseline is not None and baseline not in arms:
        raise ConfigError(line("unknown-name", "--baseline", baseline, arms))
    if branches is not None:
        meta = {**meta, "explorer_branches": branches}
    if gate is not None:
        meta = {**meta, "gate": gate}
    return recorded.out, build(dataclasses.replace(recorded, meta=RunMeta.of(meta)))
