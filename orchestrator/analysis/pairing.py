"""B/A with an interval that covers (docs/load.md, "Reading the cost"): paired window by window where the two arms
sent the same schedule, else Welch's t on the windows' logs.

A load point's window i draws its arrivals and its requests' order from the load's seed and i
(run/load/schedule.py), so A's window i and B's window i send the same requests at the same offsets: what the two
windows share (the schedule's bursts, its mix of long and short requests) cancels in their ratio. The pairs' log
ratios are then one sample, with Student's t interval on their mean (df = pairs - 1); their geometric mean is the
ratio. Whether the schedules match is read from the record alone: each window's digest of its requests' prompts in
send order and their scheduled offsets (to the millisecond). Where they differ, Welch's t on the windows rather than
a block bootstrap over the requests (bench/block_bootstrap.py): on the A/A of two runs at two seeds, Welch's
intervals held 1 as often as they claim and the bootstrap's did not (docs/benchmarks.md, "The cost's intervals").
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.analysis.stats import t_quantile

CONFIDENCE = 0.95
PAIRED = "paired: t on the log ratios of windows with one schedule"
WELCH = "Welch's t on the windows' logs (their schedules differ)"
ONE_REPLICATE = "no interval: one {what} on a side ({setting} of 2 or more gives one)"
SETTING = {"window": "load.windows", "start": "study.starts"}


@dataclass(frozen=True)
class Ratio:
    """B/A of one metric, its interval (95 % unless asked; None: none could be given, `note` says why), and how
    it was found."""

    value: float | None
    lower: float | None
    upper: float | None
    note: str
    method: str
    log_sd: float | None = None  # the sd of one replicate's log ratio (paired: a pair's; Welch: a window a side)


def schedules(rows: dict[str, Any], ids: list[int]) -> list[str]:
    """Per window of `ids`, a digest of what was sent (every row of the window, counted or not): its prompts in
    send order and their scheduled offsets from the window's first, in ms."""
    out = []
    for w in ids:
        at = np.flatnonzero(rows["batch_id"] == w)
        at = at[np.argsort(rows["send_ns"][at], kind="stable")]
        scheduled = rows["scheduled_ns"][at]
        offsets = np.round((scheduled - np.nanmin(scheduled)) / 1e6) if (~np.isnan(scheduled)).any() else scheduled
        text = "|".join(f"{rows['prompt_id'][i]}@{o:.0f}" for i, o in zip(at, offsets, strict=True))
        out.append(hashlib.sha256(text.encode()).hexdigest()[:12])
    return out


def paired(a: list[float], b: list[float], confidence: float = CONFIDENCE) -> Ratio:
    """B/A from pairs (a[i], b[i]): the geometric mean of b[i]/a[i], Student's t interval on their logs."""
    if not a:
        return Ratio(None, None, None, "no window measured on both sides", PAIRED)
    if min(a) <= 0 or min(b) <= 0:
        return Ratio(None, None, None, "a value of 0: no ratio", PAIRED)
    logs = np.log(b) - np.log(a)
    estimate = float(math.exp(logs.mean()))
    if len(logs) < 2:
        return Ratio(estimate, None, None, ONE_REPLICATE.format(what="window", setting=SETTING["window"]), PAIRED)
    sd = float(logs.std(ddof=1))
    if sd == 0:
        return Ratio(estimate, estimate, estimate, "every pair gave the same ratio", PAIRED, 0.0)
    half = t_quantile(0.5 + confidence / 2, len(logs) - 1) * sd / math.sqrt(len(logs))
    return Ratio(estimate, estimate * math.exp(-half), estimate * math.exp(half), "", PAIRED, sd)


def welch(a: list[float], b: list[float], what: str = "window", confidence: float = CONFIDENCE) -> Ratio:
    """B/A as the geometric means' ratio of the replicates, with Welch's t interval on the logs (df by
    Welch-Satterthwaite); one replicate on a side: the ratio alone, and the note says so."""
    method = WELCH if what == "window" else "Welch's t on the starts' logs"
    if not a or not b:
        return Ratio(None, None, None, "not measured on both sides", method)
    if min(a) <= 0 or min(b) <= 0:
        return Ratio(None, None, None, "a value of 0: no ratio", method)
    la, lb = np.log(a), np.log(b)
    estimate = float(math.exp(lb.mean() - la.mean()))
    if len(a) < 2 or len(b) < 2:
        return Ratio(estimate, None, None, ONE_REPLICATE.format(what=what, setting=SETTING[what]), method)
    sd = math.sqrt(float(la.var(ddof=1)) + float(lb.var(ddof=1)))
    va, vb = float(la.var(ddof=1)) / len(a), float(lb.var(ddof=1)) / len(b)
    if va + vb == 0:
        return Ratio(estimate, estimate, estimate, f"every {what} gave the same value", method, 0.0)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(va + vb)
    return Ratio(estimate, estimate * math.exp(-half), estimate * math.exp(half), "", method, sd)


def window_ratio(ids_a: list[int], a: list[float | None], schedules_a: list[str], ids_b: list[int],
                 b: list[float | None], schedules_b: list[str], confidence: float = CONFIDENCE) -> Ratio:
    """Paired over the windows both sides counted where each such window's schedule is the same on both (and there
    are two or more); else Welch over each side's windows."""
    mine_a = dict(zip(ids_a, zip(a, schedules_a, strict=True), strict=True))
    mine_b = dict(zip(ids_b, zip(b, schedules_b, strict=True), strict=True))
    both = [w for w in mine_a if w in mine_b and mine_a[w][0] is not None and mine_b[w][0] is not None]
    if len(both) >= 2 and all(mine_a[w][1] == mine_b[w][1] for w in both):
        return paired([float(mine_a[w][0] or 0) for w in both], [float(mine_b[w][0] or 0) for w in both],
                      confidence)
    return welch([v for v in a if v is not None], [v for v in b if v is not None], confidence=confidence)
