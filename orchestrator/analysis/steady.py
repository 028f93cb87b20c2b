"""Where an arm is steady at a load point, from the record alone (docs/load.md, "Reading the cost").

MSER-5 truncation (White, "An effective truncation heuristic for bias reduction in simulation output",
Simulation 69(6), 1997; White, Cobb and Spratt, "A comparison of five steady-state truncation heuristics",
WSC 2000; the rule AIPerf's steady-state detection applies): the load point's requests' latencies, in send order
over all its windows, are averaged in slices of 5; the truncation point d minimises the marginal standard error
of the slices after it, sum((z_i - mean(z[d:]))^2) / (n - d)^2, searched over the first half of the slices (past it
the statistic rests on too few slices); a cut stands only where the slices before d differ from those after it
beyond the latter's noise (`_biased`). A part after d with a trend (Mann-Kendall, `kendall_z`) is no steady
part: the series still moves, and the load point is "not steady". Otherwise every request sent before
the truncation point is kept out as warm-up: a window with less than half of its requests left is kept out
whole, the others count from there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SLICE = 5  # MSER-5: requests per slice
TREND_Z = 2.576  # Mann-Kendall's two-sided 1 % level: a steady part with a trend this sure is not steady
FEWEST_SLICES = 4  # fewer: too short a series to tell a trend from noise, all of it counts
METHOD = "MSER-5 over the requests' latencies in send order"


@dataclass
class SteadyPart:
    """Which of a load point's requests count (report.json `cost.phases[].steady`)."""

    steady: bool
    method: str = METHOD
    windows: list[int] = field(default_factory=list)  # the counted windows
    windows_kept_out: list[int] = field(default_factory=list)  # wholly warm-up (or, not steady, every one)
    requests_kept_out: int = 0  # sent before the truncation point (in counted windows too)
    from_request: int = 0  # the first counted request, in send order over the load point (0: all of it)
    note: str = ""
    windows_added: list[int] = field(default_factory=list)  # sent past the planned ones (load.warmup.extend_windows)


@dataclass(frozen=True)
class Truncation:
    """MSER-5's answer on one series: where the steady part starts (in observations), or that none was found."""

    at: int | None  # None: the minimum lies in the second half, no steady part
    slices: int


def mser5(values: np.ndarray) -> Truncation:
    """MSER-5 on a series (in its order): the truncation point in observations, a multiple of SLICE; a trailing
    partial slice is left out of the statistic (it counts after the point). Too short a series: 0."""
    n = len(values) // SLICE
    if n < FEWEST_SLICES:
        return Truncation(0, n)
    z = values[:n * SLICE].reshape(n, SLICE).mean(axis=1)
    # The statistic for every d at once: sums of z and z^2 from d to the end.
    tail_sum, tail_sq = np.cumsum(z[::-1])[::-1], np.cumsum((z * z)[::-1])[::-1]
    left = np.arange(n, 0, -1, dtype=np.float64)  # n - d
    mse = (tail_sq - tail_sum * tail_sum / left) / left ** 2
    searched = mse[:n // 2 + 1]  # past half the series the statistic rests on too few slices
    # the first of the least (a flat series' zeros differ only by rounding): no truncation without a gain
    best = int(np.flatnonzero(searched <= searched.min() + 1e-9 * float(np.mean(z * z)) / n)[0])
    moving = abs(kendall_z(z[best:])) > TREND_Z
    if not moving and best and not _biased(z[:best], z[best:]):
        best = 0  # what MSER-5 would cut is the noise of a steady series: cutting it biases the rest
    return Truncation(None if moving else best * SLICE, n)


def _biased(head: np.ndarray, tail: np.ndarray) -> bool:
    """Whether the slices MSER-5 cuts differ from the rest beyond the rest's own noise: |mean difference| over
    the tail's slice spread times sqrt(1/h + 1/t) above TREND_Z (a test of initialization bias, after Schruben,
    Singh and Tierney 1983). On a stationary, heavy-tailed series MSER-5 alone cuts a slow start half the time."""
    if len(tail) < 2:
        return True
    spread = float(tail.std(ddof=1))
    if spread == 0:
        return bool(np.any(head != tail[0]))
    z = abs(float(head.mean()) - float(tail.mean())) / (spread * math.sqrt(1 / len(head) + 1 / len(tail)))
    return z > TREND_Z


def kendall_z(z: np.ndarray) -> float:
    """Mann-Kendall's trend test (Kendall, "Rank correlation methods", 1975): S, the pairs that rise less those
    that fall, over its standard deviation with no trend, sqrt(n(n-1)(2n+5)/18)."""
    n = len(z)
    s = float(np.sign(z[None, :] - z[:, None])[np.triu_indices(n, 1)].sum())
    return s / math.sqrt(n * (n - 1) * (2 * n + 5) / 18) if n > 2 else 0.0


def steady_part(send_ns: np.ndarray, latency_s: np.ndarray, window: np.ndarray) -> tuple[SteadyPart, np.ndarray]:
    """The load point's steady part and the mask of its counted requests (rows in the record's order): MSER-5 on
    the answered requests' latencies in send order; an unanswered request counts where its send time falls."""
    order = np.argsort(send_ns, kind="stable")
    answered = order[~np.isnan(latency_s[order])]
    cut = mser5(latency_s[answered])
    ids = sorted({int(w) for w in window if not math.isnan(w)})
    if cut.at is None:
        return SteadyPart(False, windows_kept_out=ids, requests_kept_out=len(send_ns),
                          note=f"MSER-5 found no steady part in {cut.slices} slices of {SLICE} requests"), \
            np.zeros(len(send_ns), dtype=bool)
    since_ns = send_ns[answered[cut.at]] if cut.at < len(answered) else math.inf
    kept = send_ns >= since_ns if cut.at else np.ones(len(send_ns), dtype=bool)
    counted: list[int] = []
    out: list[int] = []
    for w in ids:
        mine = window == w
        (counted if kept[mine].sum() * 2 >= mine.sum() else out).append(w)
    if ids:  # a record without windows counts from the point alone
        kept &= np.isin(window, counted)
    return SteadyPart(True, windows=counted, windows_kept_out=out, requests_kept_out=int((~kept).sum()),
                      from_request=int(np.searchsorted(np.sort(send_ns), since_ns)) if cut.at else 0), kept


def row_column(rows: list[Mapping[str, Any]], name: str) -> np.ndarray:
    """One number per `responses` row as the sender records it (NaN for null)."""
    return np.array([math.nan if r.get(name) is None else float(r[name]) for r in rows], dtype=np.float64)


def steady_of_rows(rows: Iterable[Mapping[str, Any]]) -> SteadyPart:
    """The steady part of a load point's rows as the sender records them (probes and background, start 0), as
    the cost finds it (analysis/cost.py): the run asks it whether to extend the warm-up."""
    rows = list(rows)
    send, recv = row_column(rows, "send_ns"), row_column(rows, "recv_ns")
    ok = np.array([r.get("error") is None for r in rows], dtype=bool)
    return steady_part(send, np.where(ok, (recv - send) / 1e9, math.nan), row_column(rows, "batch_id"))[0]


def trend(per_window: list[float], unit: str = "requests/s") -> str:
    """'throughput 4.9 -> 7.6 -> 25.8 requests/s': each window's value, in order."""
    return "throughput " + " -> ".join(f"{v:.2g}" if v < 10 else f"{v:.1f}" for v in per_window) + f" {unit}"
