"""What an arm costs at each load point, from the record alone (docs/load.md, "Reading the cost").

Per arm and `load` phase, over its steady part (analysis/steady.py: the phase's warm-up, and what MSER-5 finds
before the server settled, kept out; probes and background, start 0): request throughput and output tokens/s per
window (completed requests, or their completion tokens, over the window's first counted send to last answer),
end-to-end latency, time to first token and inter-token latency (streamed rows only: "not observable"
otherwise, never 0), errors, send lateness (the pacing error). Per pair of arms (each A/B and the baseline's
A/A), the ratio B/A of each metric with its interval (analysis/pairing.py: paired over windows of one schedule,
else Welch's t on the logs of the replicates: windows; for time to ready and memory, starts); and the two arms'
divergence rates compared cell by cell (analysis/rates.py). The columns named here are the run's ledger's
(record/ledger.py): read once for every reader of the run, so `compare` stays fast.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis import coresidents, pairing, saturation, starts, steady, variety
from orchestrator.analysis.cost_results import CostRatio, CostReport, Metric, PhaseCost, RateComparison
from orchestrator.analysis.rates import compare_rates
from orchestrator.analysis.results import Cell, Comparison
from orchestrator.analysis.stats import pooled_bound
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, RecordedRun, of

COLUMNS = ["arm", "prompt_id", "phase", "phase_kind", "role", "batch_id", "start", "error", "send_ns",
           "scheduled_ns", "recv_ns", "streamed", "first_token_ns", "inter_token_ns", "completion_tokens",
           "load_point", "offered_rate_per_s", "server_first_step", "server_last_step", "batch_running_max",
           "prefix_seen"]
NUMBERS = ["batch_id", "start", "send_ns", "scheduled_ns", "recv_ns", "first_token_ns", "completion_tokens",
           "offered_rate_per_s", "server_first_step", "server_last_step", "batch_running_max"]
# The metrics a ratio B/A is given for, per load point (per-window values) and per arm (per-start values).
WINDOW_METRICS = ("request_throughput_per_s", "output_tokens_per_s", "latency_s", "time_to_first_token_s",
                  "inter_token_latency_s")
START_METRICS = ("time_to_ready_s", "peak_memory_bytes", "peak_gpu_memory_bytes")
NOT_STREAMED = "not observable: not streamed (load.stream false, or the engine cannot stream)"


def load_groups(sources: Recorded | RunPaths | list[RunPaths], extra: tuple[str, ...] = ()
                ) -> dict[tuple[str, str], dict[str, Any]]:
    """(arm, phase) -> its probes and background of the first start (no warm-up, and no row of a window that
    Ctrl-C cut short: those are `interrupted`, and a window counts whole or not at all), as numpy columns (NaN
    for null numbers; `gaps`: the streamed rows' inter-token gaps, ns); `extra` columns as lists."""
    tables: dict[tuple[str, str], list[pa.Table]] = {}
    for run in of(sources).runs:
        if not _has_load(run):
            continue
        label = run.label
        for batch in run.reads.responses(list(dict.fromkeys([*COLUMNS, *extra]))):
            role = batch.column("role")  # a load window's rows that count (docs/record.md)
            counted = pc.or_(pc.equal(role, "measured"), pc.equal(role, "background"))
            keep = pc.and_(pc.equal(batch.column("phase_kind"), "load"), counted)
            keep = pc.and_(keep, pc.less_equal(pc.fill_null(batch.column("start"), 0), 0))
            rows = batch.filter(pc.fill_null(keep, False))
            if not rows.num_rows:
                continue
            for arm, phase in dict.fromkeys(zip(rows.column("arm").to_pylist(), rows.column("phase").to_pylist(),
                                                strict=True)):
                mine = pc.and_(pc.equal(rows.column("arm"), arm), pc.equal(rows.column("phase"), phase))
                tables.setdefault((label + arm, phase), []).append(pa.Table.from_batches([rows.filter(mine)]))
    return {key: _columns(pa.concat_tables(parts), extra) for key, parts in tables.items()}


def _has_load(run: RecordedRun) -> bool:
    return bool(pc.any(pc.equal(run.reads.ledger().column("phase_kind"), "load")).as_py())


def _columns(table: pa.Table, extra: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {c: table.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
                           if table.column(c).null_count == 0 else
                           pc.fill_null(table.column(c).cast(pa.float64(), safe=False), math.nan)
                           .to_numpy(zero_copy_only=False)  # ns since 1970 lose their last bits either way
                           for c in NUMBERS}
    for c in ("prompt_id", "role", "load_point", "prefix_seen", *extra):
        out[c] = table.column(c).to_pylist()
    out["ok"] = pc.is_null(table.column("error")).to_numpy(zero_copy_only=False) & ~np.isnan(out["recv_ns"])
    out["streamed"] = pc.fill_null(table.column("streamed"), False).to_numpy(zero_copy_only=False)
    out["gaps"] = table.column("inter_token_ns")
    return out


@dataclass(frozen=True)
class RequestTimes:
    """Each request's times as the cost reads them (seconds, NaN where not measured), in the rows' order."""

    ok: np.ndarray  # answered, no error
    streamed: np.ndarray  # ok and streamed: the rows with a time to first token and inter-token gaps
    latency_s: np.ndarray  # the answer's end less the send
    time_to_first_token_s: np.ndarray  # the first token chunk less the send
    send_lateness_s: np.ndarray  # the send less the schedule's time


def request_times(rows: dict[str, Any]) -> RequestTimes:
    send = rows["send_ns"]
    return RequestTimes(rows["ok"], rows["ok"] & rows["streamed"], (rows["recv_ns"] - send) / 1e9,
                        (rows["first_token_ns"] - send) / 1e9, (send - rows["scheduled_ns"]) / 1e9)


def phase_cost(arm: str, phase: str, rows: dict[str, Any]) -> PhaseCost:
    """The arm's cost at one load point over its steady part (analysis/steady.py); where none is found, over every
    window, with the trend said (its ratios get no interval)."""
    return counted_cost(arm, phase, rows)[0]


def counted_cost(arm: str, phase: str, rows: dict[str, Any]) -> tuple[PhaseCost, np.ndarray]:
    """phase_cost, and the mask of the rows it counted (bench/block_bootstrap.py resamples them)."""
    times = request_times(rows)
    send, latency = rows["send_ns"], times.latency_s
    part, kept = steady.steady_part(send, np.where(rows["ok"], latency, math.nan), rows["batch_id"])
    if not part.steady:
        _, every, _ = _per_window(rows, np.ones(len(send), dtype=bool))
        part.note += "; " + steady.trend([v for v in every["request_throughput_per_s"] if v is not None])
        kept = np.ones(len(send), dtype=bool)
    ok = rows["ok"] & kept
    streamed = ok & rows["streamed"]
    ids, per, spans = _per_window(rows, kept)
    ttft, late = times.time_to_first_token_s, times.send_lateness_s
    done, tokens = int(ok.sum()), float(np.nansum(rows["completion_tokens"][ok]))
    requests, errors = int(kept.sum()), int((kept & ~rows["ok"]).sum())
    offered = rows["offered_rate_per_s"][~np.isnan(rows["offered_rate_per_s"])]
    return PhaseCost(
        arm=arm, phase=phase, load_point=next((p for p in rows["load_point"] if p), None),
        offered_rate_per_s=float(offered[0]) if offered.size else None, windows=len(spans), requests=requests,
        errors=errors, error_share=errors / requests if requests else None,
        request_throughput_per_s=_pooled(per["request_throughput_per_s"], done, spans, "requests/s"),
        output_tokens_per_s=_pooled(per["output_tokens_per_s"], tokens, spans, "tokens/s"),
        latency_s=starts.metric(latency[ok], "s"),
        time_to_first_token_s=_streamed(ttft[streamed], streamed),
        inter_token_latency_s=_streamed(_gaps(rows["gaps"], streamed), streamed),
        send_lateness_s=starts.metric(late[kept & ~np.isnan(late)], "s", "not recorded: no scheduled send time"),
        per_window=per, window_ids=ids, schedules=pairing.schedules(rows, ids), steady=part), kept


def _per_window(rows: dict[str, Any], kept: np.ndarray
                ) -> tuple[list[int], dict[str, list[float | None]], list[float]]:
    """Each window with a counted request, each metric's value in it (None: nothing measured it there), and the
    spans of those with an answer; throughput: its answered requests over its first counted send to its last
    answer."""
    window, send = rows["batch_id"], rows["send_ns"]
    ok = rows["ok"] & kept
    whole = bool(np.isnan(window).all())  # a record without windows: one
    ids = [0] if whole else sorted({int(w) for w in window[kept] if not math.isnan(w)})
    per: dict[str, list[float | None]] = {name: [] for name in WINDOW_METRICS}
    spans = []
    for w in ids:
        at = kept if whole else kept & (window == w)
        done, span_s = at & ok, _span_s(rows, at)
        spans += [span_s] if span_s > 0 else []
        per["request_throughput_per_s"].append(int(done.sum()) / span_s if span_s > 0 else None)
        per["output_tokens_per_s"].append(float(np.nansum(rows["completion_tokens"][done])) / span_s
                                          if span_s > 0 else None)
        per["latency_s"].append(_mean((rows["recv_ns"] - send)[done] / 1e9))
        per["time_to_first_token_s"].append(_mean((rows["first_token_ns"] - send)[done & rows["streamed"]] / 1e9))
        per["inter_token_latency_s"].append(_mean(_gaps(rows["gaps"], done & rows["streamed"])))
    return ids, per, spans


def _span_s(rows: dict[str, Any], at: np.ndarray) -> float:
    """First send to last answer of the rows `at`; nan where none was answered."""
    done = at & rows["ok"]
    return float(np.nanmax(rows["recv_ns"][done]) - np.nanmin(rows["send_ns"][at])) / 1e9 if done.any() else math.nan


def _mean(values: np.ndarray) -> float | None:
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else None


def _gaps(column: pa.ChunkedArray, rows: np.ndarray) -> np.ndarray:
    chosen = column.take(pa.array(np.flatnonzero(rows)))
    seconds: np.ndarray = pc.list_flatten(chosen).to_numpy(zero_copy_only=False).astype(np.float64) / 1e9
    return seconds


def _streamed(values: np.ndarray, streamed: np.ndarray) -> Metric:
    if not streamed.any():
        return Metric("s", note=NOT_STREAMED)
    return starts.metric(values[~np.isnan(values)], "s", "streamed, yet no token chunk was timed")


def _pooled(per_window: list[float | None], total: float, spans: list[float], unit: str) -> Metric:
    """The windows' values' spread, with the pooled rate as avg: all of it over all their time."""
    spread = starts.metric([v for v in per_window if v is not None], unit, "no window with a completed request")
    if spans:
        spread.avg = total / sum(spans)
    return spread


def _pairs(comparison: Comparison, arm_pairs: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    return arm_pairs if arm_pairs is not None else list(dict.fromkeys((p.arm_a, p.arm_b) for p in comparison.pairs))


def ratios(phases: list[PhaseCost], per_start: dict[str, dict[str, list[float]]],
           pairs: list[tuple[str, str]]) -> list[CostRatio]:
    by = {(c.arm, c.phase): c for c in phases}
    out = []
    for a, b in pairs:
        for name in START_METRICS:
            values = per_start.get(a, {}).get(name), per_start.get(b, {}).get(name)
            if values[0] and values[1]:
                found = pairing.welch(values[0], values[1], "start")
                out.append(CostRatio(a, b, "", name, found.value, found.lower, found.upper, len(values[0]),
                                     len(values[1]), found.note, found.method))
        for (arm, phase), cost in by.items():
            base = by.get((a, phase))
            if arm != b or base is None:
                continue
            for name in WINDOW_METRICS:
                out.append(_window_ratio(a, b, phase, name, base, cost))
    return out


def _window_ratio(a: str, b: str, phase: str, name: str, base: PhaseCost, cost: PhaseCost) -> CostRatio:
    found = pairing.window_ratio(base.window_ids, base.per_window[name], base.schedules, cost.window_ids,
                                 cost.per_window[name], cost.schedules)
    n_a, n_b = (sum(v is not None for v in c.per_window[name]) for c in (base, cost))
    unsteady = [c.arm for c in (base, cost) if not c.steady.steady]
    if unsteady and found.value is not None:  # no interval on a moving part
        return CostRatio(a, b, phase, name, found.value, None, None, n_a, n_b,
                         f"no interval: {' and '.join(unsteady)} not steady", found.method)
    return CostRatio(a, b, phase, name, found.value, found.lower, found.upper, n_a, n_b, found.note, found.method)


def rate_comparisons(cells: list[Cell], pairs: list[tuple[str, str]]) -> list[RateComparison]:
    """Per pair and cell (prompt, phase), then per phase pooled over its prompts (prompt "*": pooling assumes
    one rate across them, as the pooled bound does)."""
    judged = {(c.arm, c.prompt_id, c.phase): c for c in cells if c.divergent is not None and c.n}
    out = []
    for a, b in pairs:
        pooled: dict[str, list[int]] = {}
        for (arm, prompt, phase), cell in judged.items():
            base = judged.get((a, prompt, phase))
            if arm != b or base is None:
                continue
            out.append(_rates(a, b, prompt, phase, base.divergent or 0, base.n, cell.divergent or 0, cell.n))
            totals = pooled.setdefault(phase, [0, 0, 0, 0, 0])
            for i, v in enumerate((base.divergent or 0, base.n, cell.divergent or 0, cell.n, 1)):
                totals[i] += v
        out += [_rates(a, b, "*", phase, *t[:4]) for phase, t in pooled.items() if t[4] > 1]
    return out


def _rates(a: str, b: str, prompt: str, phase: str, k_a: int, n_a: int, k_b: int, n_b: int) -> RateComparison:
    return RateComparison(a, b, prompt, phase, **asdict(compare_rates(k_a, n_a, k_b, n_b)))


def cost(recorded: Recorded, comparison: Comparison,
         arm_pairs: list[tuple[str, str]] | None = None, order: list[str] | None = None) -> CostReport:
    """The cost of every arm at every load point, the starts, the ratios and rate comparisons of each pair,
    and the probes' co-residents; each list in the study's `order` of arms (the baseline, then as planned),
    arms it does not name after, as the record has them."""
    groups = load_groups(recorded)
    report = CostReport(starts=starts.summarise(recorded))
    planned = (recorded.meta.sample_size or {}).get("load_windows", {})  # run.json; older runs: not said
    for (arm, phase), rows in groups.items():
        report.phases.append(phase_cost(arm, phase, rows))
        if phase in planned:  # the windows sent past the planned ones: the warm-up extended until steady
            ids = np.unique(rows["batch_id"][~np.isnan(rows["batch_id"])])
            report.phases[-1].steady.windows_added = [int(w) for w in ids if w >= planned[phase]]
        report.workloads.append(variety.workload(arm, phase, rows))
        report.co_residents += coresidents.per_cell(arm, phase, rows["prompt_id"], rows["role"],
                                                     rows["server_first_step"], rows["server_last_step"],
                                                     rows["batch_running_max"])
    sets = (recorded.meta.sample_size or {}).get("series", {})  # load.series: analysis/saturation.py
    report.saturation = saturation.series_of(report.phases, groups, sets)
    pairs = _pairs(comparison, arm_pairs)
    report.ratios = saturation.same_load(ratios(report.phases, starts.per_start(recorded), pairs), sets)
    report.rates = rate_comparisons(comparison.cells, pairs)
    return in_order(report, order or [])


def in_order(report: CostReport, order: list[str]) -> CostReport:
    """Every list sorted by its arm's place in `order` (ratios and rates by B's, then A's); stable, so each
    arm's load points keep the record's order."""
    rank = {arm: i for i, arm in enumerate(dict.fromkeys(order))}

    def at(arm: str) -> int:
        return rank.get(arm, len(rank))

    report.starts.sort(key=lambda s: at(s.arm))
    report.phases.sort(key=lambda c: at(c.arm))
    report.co_residents.sort(key=lambda c: at(c.arm))
    report.saturation.sort(key=lambda c: at(c.arm))
    report.workloads.sort(key=lambda w: at(w.arm))
    report.ratios.sort(key=lambda r: (at(r.arm_b), at(r.arm_a)))
    report.rates.sort(key=lambda r: (at(r.arm_b), at(r.arm_a)))
    return report


def stays_correct(cells: list[Cell], arm: str, phase: str | None = None) -> tuple[int, int, float, float, int]:
    """An arm's probes (or, without a phase, all its judged cells) pooled: (divergent, n, lower, upper, cells)."""
    mine = [c for c in cells if c.arm == arm and (phase is None or c.phase == phase) and c.divergent is not None
            and c.stopped_after is None]
    rate = pooled_bound([c.divergent or 0 for c in mine], [c.n for c in mine])
    return rate.divergent, rate.n, rate.lower_bound_95, rate.upper_bound_95, len(mine)
