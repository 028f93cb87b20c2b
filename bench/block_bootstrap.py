"""A block bootstrap over a load point's steady requests: B/A of a per-request metric where the two arms' windows do
not pair (their schedules differ), the alternative to Welch's t on the windows that bench/cost_calibration.py
--unmatched measures. It is not the cost's fallback: on the reference engine its intervals held 1 less often than
Welch's (docs/benchmarks.md, "The cost's intervals: coverage"; docs/load.md, "Reading the cost").

Requests in flight together share the server's state (its batch, its queue), so neighbours in send order are
correlated and resampling requests one by one would understate the spread. Blocks of consecutive requests keep
that dependence (Künsch, "The jackknife and the bootstrap for general stationary observations", Annals of
Statistics 17(3), 1989); wrapped around the series' end, so that every request is in as many blocks as any other
(the circular block bootstrap: Politis and Romano, "A circular block-resampling procedure for stationary data",
1992). The block length is ceil(n^(1/3)) for n requests: the order Hall, Horowitz and Jing ("On blocking rules for
the bootstrap with dependent data", Biometrika 82(3), 1995) find optimal for a variance or a bias. A and B are
resampled apart; each resample's statistic is the ratio of its sums (sum of values over sum of weights: the mean
latency, or the mean gap over every gap of the requests); the interval is the 2.5 and 97.5 percentiles of the
resampled ratios B/A. The generator's seed is a digest of the data, so one record gives one interval.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis.cost import request_times
from orchestrator.analysis.pairing import CONFIDENCE, Ratio

RESAMPLES = 2000
FEWEST_REQUESTS = 20  # fewer: under 7 blocks of ceil(n^(1/3)), too few to resample a spread from
METHOD = f"block bootstrap: circular blocks of ceil(n^(1/3)) requests in send order, {RESAMPLES} resamples, percentile"


@dataclass(frozen=True)
class Series:
    """One arm's steady requests in send order: each one's value (a latency; the sum of its inter-token gaps)
    and weight (1; its number of gaps). The metric is sum(values) / sum(weights)."""

    values: np.ndarray
    weights: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def statistic(self) -> float:
        total = float(self.weights.sum())
        return float(self.values.sum()) / total if total > 0 else math.nan


def block_length(n: int) -> int:
    """ceil(n^(1/3)), the cube root's rounding error (27 ** (1/3) = 3.0000000000000004) left out."""
    root: float = float(n) ** (1 / 3)
    return max(1, math.ceil(root - 1e-9))


def ratio(a: Series, b: Series, resamples: int = RESAMPLES) -> Ratio:
    """B/A of the two series' statistics with the block bootstrap's percentile interval; a side with too few
    requests: the ratio alone, and the note says so."""
    if not len(a) or not len(b):
        return Ratio(None, None, None, "not measured on both sides", METHOD)
    base, other = a.statistic(), b.statistic()
    if not base > 0 or not other > 0:
        return Ratio(None, None, None, "a value of 0: no ratio", METHOD)
    estimate = other / base
    short = min(len(a), len(b))
    if short < FEWEST_REQUESTS:
        return Ratio(estimate, None, None, f"no interval: {short} requests on a side, too few for a block bootstrap "
                     f"(it needs {FEWEST_REQUESTS}: more load.requests or load.windows)", METHOD)
    rng = np.random.default_rng(_seed(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        found = _resampled(b, rng, resamples) / _resampled(a, rng, resamples)
    found = found[np.isfinite(found)]
    if not found.size:
        return Ratio(estimate, None, None, "no interval: no resample had a weight", METHOD)
    tail = (1 - CONFIDENCE) / 2
    lower, upper = (float(q) for q in np.quantile(found, [tail, 1 - tail]))
    return Ratio(estimate, lower, upper, "every resample gave the same ratio" if lower == upper else "", METHOD)


def _resampled(series: Series, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The statistic of `resamples` circular block resamples of the series, n requests each: k - 1 whole blocks
    and the first r requests of a k-th, their sums read from cumulative sums (no resample is built)."""
    n, size = len(series), block_length(len(series))
    k = math.ceil(n / size)
    rest = n - (k - 1) * size
    starts = rng.integers(0, n, size=(resamples, k))
    sums = []
    for column in (series.values, series.weights):
        around = np.concatenate(([0.0], np.cumsum(np.concatenate((column, column[:size])), dtype=np.float64)))
        whole, part = around[size:size + n] - around[:n], around[rest:rest + n] - around[:n]
        sums.append(whole[starts[:, :-1]].sum(axis=1) + part[starts[:, -1]])
    result: np.ndarray = sums[0] / sums[1]
    return result


def _seed(a: Series, b: Series) -> int:
    digest = hashlib.sha256()
    for column in (a.values, a.weights, b.values, b.weights):
        digest.update(np.ascontiguousarray(column, dtype=np.float64).tobytes())
    return int.from_bytes(digest.digest()[:8], "big")


def request_series(rows: dict[str, Any], kept: np.ndarray) -> dict[str, Series]:
    """Per metric of the requests, the counted answered ones in send order (`rows` as analysis/cost.py's
    load_groups gives them, `kept` as its counted_cost): each latency and time to first token (weight 1), each
    request's inter-token gaps' sum (weight: how many)."""
    times = request_times(rows)
    order = np.argsort(rows["send_ns"], kind="stable")
    done = order[(rows["ok"] & kept)[order]]
    timed = done[times.streamed[done] & ~np.isnan(times.time_to_first_token_s[done])]
    chosen = rows["gaps"].take(pa.array(done[times.streamed[done]], type=pa.int64()))
    counts = pc.fill_null(pc.list_value_length(chosen), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(chosen).to_numpy(zero_copy_only=False).astype(np.float64) / 1e9
    total = np.concatenate(([0.0], np.cumsum(flat)))
    ends = np.cumsum(counts)
    return {"latency_s": Series(times.latency_s[done], np.ones(len(done))),
            "time_to_first_token_s": Series(times.time_to_first_token_s[timed], np.ones(len(timed))),
            "inter_token_latency_s": Series(total[ends] - total[ends - counts], counts.astype(np.float64))}
