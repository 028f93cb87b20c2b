"""What a step's study found, read from its run dir as `compare` left it (report.json, guard.json): the cells
with their divergence and bounds, cold first against warm, sequential against concurrent, the starts and what
each arm cost, the known issues by version that affect it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orchestrator.analysis.matrix import mean_interval
from orchestrator.guard.results import GuardResult
from orchestrator.guard.side_effects import side_effects
from orchestrator.record.paths import RunPaths, read_json
from orchestrator.record.tables import read_table
from orchestrator.triage.state import DONE, FAILED, Cell, StepOutcome
from orchestrator.triage.steps import AS_GIVEN

DIFFERS = "differ"  # a schedule pair whose answers were shown to differ (analysis/compare.py)


def _read(path: Path) -> dict[str, Any]:
    doc = read_json(path) if path.is_file() else {}
    return doc if isinstance(doc, dict) else {}


def observe_onset(name: str, run_dir: Path, command: str, status: int, answer: tuple[str, ...]) -> StepOutcome:
    """An onset search's outcome: its answer, and the requests its jobs sent (said in the answer)."""
    spent = sum(int(m) for line in answer for m in re.findall(r"(\d+) requests", line))
    ok = status == 0 and bool(answer)
    return StepOutcome(name=name, status=DONE if ok else FAILED, run_dir=str(run_dir), command=command,
                       reason="" if ok else f"its search ended with exit status {status}; see {run_dir}",
                       requests=spent, answer=answer)


# the load point's metrics the findings give (report.json `cost.phases`, docs/load.md): label, unit, statistic
LOAD_METRICS = (("request_throughput_per_s", "requests/s", "avg"), ("output_tokens_per_s", "output tokens/s", "avg"),
                ("latency_s", "s latency p50", "p50"), ("latency_s", "s latency p99", "p99"))


def load_cost(report: dict[str, Any]) -> tuple[str, ...]:
    """What the arm as given cost at its load point, in words: each metric with the 95 % interval of its mean over
    the windows (Student's t, analysis/matrix.py) where it is a per-window rate, and the error share."""
    said = []
    for phase in (report.get("cost") or {}).get("phases") or []:
        if phase.get("arm") != AS_GIVEN:
            continue
        parts = []
        for metric, unit, stat in LOAD_METRICS:
            value = (phase.get(metric) or {}).get(stat)
            if value is None:
                continue
            windows = [v for v in (phase.get("per_window") or {}).get(metric) or [] if v is not None]
            low, high = mean_interval(windows) if stat == "avg" else (None, None)
            parts.append(f"{value:.3g} {unit}" + (f" ({low:.3g}-{high:.3g} at 95 % over {len(windows)} windows)"
                                                  if low is not None and high is not None else ""))
        errors = (phase.get("error_share") or {}).get("avg")
        said.append(f"at {phase.get('load_point') or phase.get('phase')}: {', '.join(parts) or 'not measured'}"
                    + (f"; errors {errors:.1%}" if errors else ""))
    return tuple(said)


# the A/B's paired ratios at a load point the findings give (report.json `cost.ratios`): metric, label
LOAD_RATIOS = (("request_throughput_per_s", "throughput"), ("latency_s", "latency"),
               ("time_to_first_token_s", "time to first token"))


def load_ratios(report: dict[str, Any]) -> tuple[str, ...]:
    """An A/B at a load point: each load phase's other arm against the arm as given, paired over its windows, in
    words ("at closed loop of 8: throughput x0.52 [0.49, 0.56], ..."); a ratio without an interval says why."""
    cost = report.get("cost") or {}
    points = {p.get("phase"): p.get("load_point") or p.get("phase") for p in cost.get("phases") or []}
    said: dict[str, list[str]] = {}
    for ratio in cost.get("ratios") or []:
        label = dict(LOAD_RATIOS).get(ratio.get("metric"))
        if ratio.get("arm_a") != AS_GIVEN or ratio.get("phase") not in points or label is None \
                or ratio.get("ratio") is None:
            continue
        low, high = ratio.get("lower_95"), ratio.get("upper_95")
        said.setdefault(points[ratio["phase"]], []).append(
            f"{label} x{ratio['ratio']:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None
                                                else f" ({ratio.get('note') or 'no interval'})"))
    return tuple(f"at {point}: {', '.join(parts)}" for point, parts in said.items())


def failed_because(paths: RunPaths) -> str:
    """What the step's failed arms said (their record's error), so the page names the cause, not only the dir."""
    if not paths.data.is_dir():
        return ""
    rows = read_table(paths, "arms", ["arm", "status", "error"]).to_pylist()
    said = [f"{r['arm']}: {r['error']}" for r in rows if r.get("status") == "failed" and r.get("error")]
    return f": {'; '.join(dict.fromkeys(said))}" if said else ""


def observe(name: str, run_dir: Path, command: str, status: int) -> StepOutcome:
    """The step's outcome from its run dir; `status`: the study's exit status (4: the measurement failed)."""
    paths = RunPaths(run_dir)
    report = _read(paths.report_json)
    cells = tuple(Cell(arm=c["arm"], phase=c["phase"], prompt=c["prompt_id"], n=int(c["n"]),
                       divergent=int(c["divergent"]), distinct=int(c["distinct_signatures"] or 0),
                       lower_95=float(c["lower_bound_95"] or 0.0),  # a cell stopped early: a lower bound only
                       upper_95=float(1.0 if c["upper_bound_95"] is None else c["upper_bound_95"]))
                  for c in report.get("cells") or [] if c.get("n"))
    cold = tuple(f"{c['arm']}/{c['prompt_id']}" for c in report.get("cold") or [] if c.get("matches_warm") is False)
    schedules = tuple(f"{s['arm']}/{s['prompt_id']}" for s in report.get("schedules") or []
                      if s.get("verdict") == DIFFERS)
    starts = (report.get("cost") or {}).get("starts") or []
    first = next((s for s in starts if s["arm"] == "as_given"), starts[0] if starts else {})
    memory, gpu_memory = ({s["arm"]: s[key]["avg"] for s in starts if (s.get(key) or {}).get("avg")}
                          for key in ("peak_memory_bytes", "peak_gpu_memory_bytes"))
    ready = {s["arm"]: s["time_to_ready_s"]["avg"] for s in starts if s["time_to_ready_s"].get("avg")}
    guard = GuardResult.from_json(_read(paths.guard_json)) if paths.guard_json.is_file() else GuardResult()
    # a switch's A/B (two arms): what the switch moved besides its declared variable (the side-effect audit)
    others = sorted({c.arm for c in cells} - {AS_GIVEN})
    moved = (tuple(m.text() for m in side_effects(run_dir, AS_GIVEN, others[0]).moved)
             if report and len(others) == 1 and paths.guard_json.is_file() else ())
    return StepOutcome(
        name=name, status=FAILED if status == 4 or not report else DONE, run_dir=str(run_dir), command=command,
        reason="" if report and status != 4 else (f"its study ended with exit status {status}; see {run_dir}"
                                                  + failed_because(paths)),
        # measured, kept out of the verdict (batches not co-resident), cold, and each later start's one request a
        # prompt (analysis/starts.py)
        requests=sum(c.n for c in cells) + len(report.get("cold") or []) + sum(
            int(c.get("batches_kept_out") or 0) * int(c.get("batch_size") or 0) for c in report.get("cells") or [])
        + max(0, int(first.get("starts") or 1) - 1) * len({c.prompt for c in cells}), cells=cells, cold_differs=cold,
        schedule_differs=schedules, starts=int(first.get("starts") or 0), starts_ready=int(first.get("ready") or 0),
        start_failure_upper_95=first.get("failure_upper_95"),
        signatures_across_starts=max((first.get("signatures_across_starts") or {}).values(), default=0),
        known_issues=tuple(note.line for note in guard.known_issues if note.affected),
        peak_memory_bytes=memory, peak_gpu_memory_bytes=gpu_memory, time_to_ready_s=ready, side_effects=moved,
        load_cost=load_cost(report), load_ratios=load_ratios(report))
