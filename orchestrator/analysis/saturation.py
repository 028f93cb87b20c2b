"""Over-saturation of a load point, and where an arm saturates (docs/load.md, "To saturation").

A point over-saturates when the server falls behind its arrivals and its backlog grows, the two signals of
GuideLLM's over-saturation stop (its `OverSaturationConstraint`: the response rate not keeping up with the
request rate, and time to first token rising while requests pile up), decided here on a point's whole
windows, pooled and in each window alike (a stable queue swings over a short window; a backlog is in each):

- behind: the answers' rate (answered requests less one over the first to the last answer of a window) is below
  (1 - tolerance) x the arrivals' rate (scheduled requests less one over the first to the last scheduled send),
  pooled over the windows. Rates of the window's own schedule, not the nominal rate: a Poisson draw of a few
  dozen arrivals is itself some 15 % off its rate, and a server that keeps up answers as fast as they arrive;
- growing: each request's wait (time to first token, or to its answer where not streamed, from its scheduled
  send) rises with its scheduled send: the least squares slope within the windows, its 95 % t interval above 0,
  and at least the tolerance (over-saturated at rho times the capacity, the wait grows 1 - 1/rho seconds a
  second as the answers' share falls to 1/rho).

How often the rule calls a planted queue over-saturated, below and above its capacity: bench/saturation_stop.py.

The same rule decides at run time whether the series goes on (run/send/series.py, on the rows as they are
recorded) and in the report (analysis/cost.py, on the record): a resumed run decides as the first one did.
An arm's saturation point lies between the throughput of its last point that kept up and the offered rate of
the first that did not (the server could not keep up with it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.analysis.cost_results import CostRatio, PhaseCost, SaturationPoint, SaturationSeries
from orchestrator.analysis.stats import t_quantile
from orchestrator.analysis.steady import row_column

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Window:
    """One window of a point, a request each: its scheduled send, its wait (NaN: no answer, or not timed) and
    its answer's end (NaN: none), in seconds from any origin shared by the three."""

    scheduled_s: np.ndarray
    waited_s: np.ndarray
    answered_s: np.ndarray


@dataclass(frozen=True)
class Verdict:
    over_saturated: bool
    answer_share: float | None  # the answers' rate over the arrivals' (None: a closed loop, not judged)
    wait_slope: float | None  # seconds of wait per second of schedule
    why: str


def verdict(windows: list[Window], tolerance: float, offered_rate_per_s: float | None) -> Verdict:
    """A point's verdict from its whole windows (see the module's docstring): over-saturated pooled over them
    and in each one (a stable queue swings over a short window; a backlog is in every window); a closed loop
    (no offered rate) sends each request as one is answered: it keeps up by construction."""
    if offered_rate_per_s is None:
        return Verdict(False, None, None, "a closed loop: keeps up by construction")
    pooled = _judged(windows, tolerance)
    if not pooled.over_saturated or len(windows) < 2:
        return pooled
    each = sum(_judged([w], tolerance).over_saturated for w in windows)
    if each == len(windows):
        return Verdict(True, pooled.answer_share, pooled.wait_slope, f"{pooled.why}, in each of its windows")
    return Verdict(False, pooled.answer_share, pooled.wait_slope, f"{pooled.why}, yet in {each} of "
                   f"{len(windows)} windows only")


def _judged(windows: list[Window], tolerance: float) -> Verdict:
    arrivals = sum(len(w.scheduled_s) - 1 for w in windows)
    arrival_span = sum(_span(w.scheduled_s) for w in windows)
    answered = [w.answered_s[~np.isnan(w.answered_s)] for w in windows]
    if not arrivals or not arrival_span > 0:
        return Verdict(False, None, None, "too few requests a window to judge (load.requests of 3 or more)")
    answer_span = sum(_span(a) for a in answered)
    share = sum(max(len(a) - 1, 0) for a in answered) / answer_span / (arrivals / arrival_span) \
        if answer_span > 0 else 0.0
    slope, lower = _slope(windows)
    behind = share < 1 - tolerance
    # over-saturated, the wait grows by 1 - 1/rho seconds a second of schedule, as the answers' share falls to
    # 1/rho: the slope must clear the tolerance too (and be shown above 0), so a stable queue's swing over a
    # short window does not pass for a backlog
    growing = lower is not None and lower > 0 and slope is not None and slope >= tolerance
    said = f"answers at {share:.0%} of the arrivals' rate" + (
        "" if slope is None else f", wait {'growing' if growing else 'not shown growing'} "
                                 f"({slope:+.3g} s per s of schedule)")
    return Verdict(behind and (growing or slope is None), share, slope, said)


def _span(values: np.ndarray) -> float:
    return float(np.max(values) - np.min(values)) if len(values) > 1 else 0.0


def _slope(windows: list[Window]) -> tuple[float | None, float | None]:
    """The wait's slope against the scheduled send, within the windows (each centred on its own means), and
    the lower end of its 95 % t interval; (None, None) with fewer than three timed waits."""
    xs, ys = [], []
    for w in windows:
        timed = ~np.isnan(w.waited_s) & ~np.isnan(w.scheduled_s)
        if timed.sum() >= 2:
            xs.append(w.scheduled_s[timed] - w.scheduled_s[timed].mean())
            ys.append(w.waited_s[timed] - w.waited_s[timed].mean())
    x, y = (np.concatenate(xs), np.concatenate(ys)) if xs else (np.array([]), np.array([]))
    df = len(x) - 1 - len(xs)
    sxx = float((x * x).sum())
    if df < 1 or sxx <= 0:
        return None, None
    slope = float((x * y).sum()) / sxx
    se = math.sqrt(float(((y - slope * x) ** 2).sum()) / df / sxx)
    return slope, slope - t_quantile(0.5 + CONFIDENCE / 2, df) * se


def windows_of(batch: np.ndarray, scheduled_ns: np.ndarray, first_token_ns: np.ndarray, recv_ns: np.ndarray,
               ok: np.ndarray) -> list[Window]:
    """A point's rows (numpy columns, NaN for null) cut into its windows (`batch_id`)."""
    out = []
    for window in [w for w in np.unique(batch) if not math.isnan(w)]:
        at = batch == window
        answered = np.where(ok[at], recv_ns[at], np.nan)
        waited_to = np.where(np.isnan(first_token_ns[at]), answered, np.where(ok[at], first_token_ns[at], np.nan))
        origin = np.nanmin(scheduled_ns[at]) if not np.isnan(scheduled_ns[at]).all() else 0.0
        out.append(Window((scheduled_ns[at] - origin) / 1e9, (waited_to - scheduled_ns[at]) / 1e9,
                          (answered - origin) / 1e9))
    return out


def windows_of_rows(rows: Iterable[Mapping[str, Any]]) -> list[Window]:
    """The same from `responses` rows as the sender records them."""
    rows = list(rows)
    ok = np.array([r.get("error") is None and r.get("recv_ns") is not None for r in rows], dtype=bool)
    return windows_of(row_column(rows, "batch_id"), row_column(rows, "scheduled_ns"),
                      row_column(rows, "first_token_ns"), row_column(rows, "recv_ns"), ok)


def series_of(costs: list[PhaseCost], rows: Mapping[tuple[str, str], Mapping[str, Any]],
              settings: Mapping[str, Mapping[str, Any]]) -> list[SaturationSeries]:
    """Each arm's series (`settings`: run.json's `sample_size.series`, phase -> its `points` (their phase names
    in order) and `tolerance`), from the points' costs and rows (analysis/cost.py's `load_groups`)."""
    out = []
    for phase, setting in settings.items():
        names = list(setting["points"])
        for arm in dict.fromkeys(c.arm for c in costs if c.phase in names):
            mine = sorted((c for c in costs if c.arm == arm and c.phase in names), key=lambda c: names.index(c.phase))
            judged = [(c, verdict(_windows(rows[(arm, c.phase)]), setting["tolerance"], c.offered_rate_per_s))
                      for c in mine]
            out.append(series_summary(arm, phase, setting["tolerance"], judged, len(names)))
    return out


def same_load(ratios: list[CostRatio], settings: Mapping[str, Mapping[str, Any]]) -> list[CostRatio]:
    """The ratios B/A but those at a series' later points: each arm is offered its own rates there (from its own
    single-request latency), so a ratio would compare two load points; point 0, one at a time, is the same."""
    later = {name for setting in settings.values() for name in list(setting["points"])[1:]}
    return [r for r in ratios if r.phase not in later]


def _windows(rows: Mapping[str, Any]) -> list[Window]:
    return windows_of(rows["batch_id"], rows["scheduled_ns"], rows["first_token_ns"], rows["recv_ns"], rows["ok"])


def series_summary(arm: str, phase: str, tolerance: float, points: list[tuple[PhaseCost, Verdict]],
                   planned: int) -> SaturationSeries:
    """An arm's series: each point with its verdict, and the bound of its saturation point."""
    out = SaturationSeries(arm=arm, phase=phase, tolerance=tolerance, planned_points=planned)
    kept: float | None = None
    for cost, said in points:
        if cost.request_throughput_per_s.avg is None:  # nothing answered (an engine that died): no verdict
            out.lower_per_s, out.note = kept, f"not reached: {cost.phase} had no answer"
            return out
        out.points.append(SaturationPoint(cost.phase, cost.load_point, cost.offered_rate_per_s,
                                          cost.request_throughput_per_s.avg, said.answer_share, said.wait_slope,
                                          said.over_saturated, said.why))
        if said.over_saturated:
            out.lower_per_s, out.upper_per_s = kept, cost.offered_rate_per_s
            break
        kept = cost.request_throughput_per_s.avg if kept is None else max(
            kept, cost.request_throughput_per_s.avg or 0.0)
    else:
        out.lower_per_s = kept
        out.note = "not reached: every point kept up (raise load.series.in_flight)" \
            if len(points) == planned else "not reached: the series was not run to its end"
    return out


def window_interval(per_window: list[float | None]) -> tuple[float | None, float | None, float | None]:
    """(mean, lower, upper): the geometric mean of the windows' values with the 95 % t interval of the mean of
    their logs, taken back (as the cost's ratios are: a rate or a latency spreads log-normally, and its interval
    stays above 0); no interval with one window, or a value of 0. A window nothing measured (None) is left out."""
    values = [v for v in per_window if v is not None and not math.isnan(v)]
    if not values:
        return None, None, None
    if len(values) < 2 or min(values) <= 0:
        return float(np.mean(values)), None, None
    logs = np.log(values)
    half = t_quantile(0.5 + CONFIDENCE / 2, len(values) - 1) * float(np.std(logs, ddof=1)) / math.sqrt(len(values))
    centre = float(np.mean(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)
