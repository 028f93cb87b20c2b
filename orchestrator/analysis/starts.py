"""`study.starts`: does the arm start. From the arms table (a row per start; `run --resume` adds attempts, and
the latest attempt per (arm, start) counts): how many starts answered, the failure rate with its bound, the
time to ready and the memory peaks over starts; from the responses, each start's first answer per prompt and
how many distinct signatures those first answers have (start 0: its first request of the prompt; starts 1..:
the one request per prompt they send, role measured with start > 0)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis.cost_results import Metric, StartsSummary
from orchestrator.analysis.stats import divergence_bound
from orchestrator.record.recorded import ArmStart, Recorded

SIGNATURES = ("sig_top_logprobs", "sig_token_ids", "sig_text")  # finest first, as analysis/results.py
ANSWER_COLUMNS = ["arm", "prompt_id", "role", "start", "send_ns", "error", *SIGNATURES]
NOT_COUNTED = ("interrupted",)  # a start stopped by Ctrl-C neither started nor failed


def metric(values: list[float] | np.ndarray, unit: str, why_none: str = "") -> Metric:
    """{unit, avg, p50, p90, p99, std, count} of the values (numpy's linear percentiles, the population std, as
    AIPerf's export); no values: every number None and `why_none` says why (a measured metric has no note)."""
    array = np.asarray(values, dtype=np.float64)
    if not array.size:
        return Metric(unit, note=why_none or "not measured")
    p50, p90, p99 = (float(v) for v in np.percentile(array, [50, 90, 99]))
    return Metric(unit, float(array.mean()), p50, p90, p99, float(array.std()), int(array.size), "",
                  float(array.min()), float(array.max()))


def arm_rows(recorded: Recorded) -> list[tuple[str, ArmStart]]:
    """Every start of every arm (the latest attempt per arm and start, as read), named as the comparison names
    the arm, by arm and start; none of an imported run (docs/import.md), whose arms were never started here."""
    return sorted(((run.label + arm.arm, arm) for run in recorded.runs if not run.meta.imported
                   for arm in run.starts),
                  key=lambda named: (named[0], named[1].start))


def summarise(recorded: Recorded) -> list[StartsSummary]:
    rows = arm_rows(recorded)
    several = any(r.start > 0 for _, r in rows)
    firsts = first_signatures(recorded) if several else {}
    by_arm: dict[str, list[ArmStart]] = {}
    for name, row in rows:
        by_arm.setdefault(name, []).append(row)
    out = []
    for arm, starts in by_arm.items():
        counted = [r for r in starts if r.status not in NOT_COUNTED]
        ready = [r for r in counted if r.ready_ns is not None and r.start_ns is not None]
        low, high = divergence_bound(len(counted) - len(ready), len(counted))
        notes = sorted({r.memory_note for r in starts if r.memory_note})
        why = "; ".join(notes) or "not observable: not sampled"
        first = starts[0]
        out.append(StartsSummary(
            arm=arm, starts=len(counted), ready=len(ready), failure_lower_95=low, failure_upper_95=high,
            time_to_ready_s=metric([_ready_s(r) for r in ready], "s", "" if ready else "no start answered"),
            peak_memory_bytes=_peak([r.peak_memory_bytes for r in starts], why),
            peak_gpu_memory_bytes=_peak([r.peak_gpu_memory_bytes for r in starts], why),
            memory_note="; ".join(notes), model=first.model, model_revision=first.model_revision,
            signatures_across_starts=_distinct(firsts.get(arm, {}))))
    return out


def _ready_s(row: ArmStart) -> float:
    return ((row.ready_ns or 0) - (row.start_ns or 0)) / 1e9


def _peak(values: list[int | None], why: str) -> Metric:
    return metric([v for v in values if v is not None], "bytes", why)


def per_start(recorded: Recorded) -> dict[str, dict[str, list[float]]]:
    """Per arm, each replicate's value over its starts (the ratios' replicates): time to ready, memory peaks."""
    out: dict[str, dict[str, list[float]]] = {}
    for name, r in arm_rows(recorded):
        values = out.setdefault(name, {"time_to_ready_s": [], "peak_memory_bytes": [], "peak_gpu_memory_bytes": []})
        if r.ready_ns is not None and r.start_ns is not None:
            values["time_to_ready_s"].append(_ready_s(r))
        for column, value in (("peak_memory_bytes", r.peak_memory_bytes),
                              ("peak_gpu_memory_bytes", r.peak_gpu_memory_bytes)):
            if value is not None:
                values[column].append(float(value))
    return out


def first_signatures(recorded: Recorded) -> dict[str, dict[str, dict[int, tuple[Any, ...]]]]:
    """arm -> prompt -> start -> the signatures (finest first) of that start's first successful answer."""
    best: dict[tuple[str, str, int], tuple[int, tuple[Any, ...]]] = {}
    for run in recorded.runs:
        label = run.label
        for batch in run.reads.responses(ANSWER_COLUMNS):
            keep = pc.and_(pc.is_null(batch.column("error")), pc.is_in(batch.column("role"),
                                                                        value_set=pa.array(["cold", "measured"])))
            for row in batch.filter(pc.fill_null(keep, False)).to_pylist():
                start = row["start"] or 0
                if start > 0 and row["role"] != "measured":
                    continue
                key = (label + row["arm"], row["prompt_id"], start)
                when = row["send_ns"] if row["send_ns"] is not None else 0
                if key not in best or when < best[key][0]:
                    best[key] = (when, tuple(row[c] for c in SIGNATURES))
    out: dict[str, dict[str, dict[int, tuple[Any, ...]]]] = {}
    for (arm, prompt, start), (_, sigs) in best.items():
        out.setdefault(arm, {}).setdefault(prompt, {})[start] = sigs
    return out


def _distinct(prompts: dict[str, dict[int, tuple[Any, ...]]]) -> dict[str, int]:
    """Per prompt answered by more than one start: distinct signatures among the starts' first answers, on the
    finest basis all of them have."""
    out = {}
    for prompt, by_start in prompts.items():
        if len(by_start) < 2:
            continue
        answers = list(by_start.values())
        basis = next((i for i in range(len(SIGNATURES)) if all(a[i] is not None for a in answers)), None)
        if basis is not None:
            out[prompt] = len({a[basis] for a in answers})
    return out

