"""A series to saturation in the report (`load.series`, docs/load.md "To saturation"): the opening line naming
each arm's saturation point with its bound, the section's table per arm (throughput, latency, time to first
token and divergence rate against offered load, each with its 95 % interval) and report.html's pictures."""

from __future__ import annotations

from orchestrator.analysis.cost import stays_correct
from orchestrator.analysis.cost_results import CostReport, PhaseCost, SaturationSeries
from orchestrator.analysis.results import Cell
from orchestrator.analysis.saturation import window_interval
from orchestrator.report import svg

ONE_AT_A_TIME = "one at a time"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _interval(values: list[float | None]) -> str:
    mean, low, high = window_interval(values)
    return _n(mean) if low is None or high is None else f"{_n(mean)} [{_n(low)}, {_n(high)}]"


def bound(s: SaturationSeries) -> str:
    """The saturation point in words: its bound, or why there is none."""
    over = next((p for p in s.points if p.over_saturated), None)
    if over is None:
        return f"not reached ({s.note}); the most a point reached: {_n(s.lower_per_s)} req/s"
    below = "" if s.lower_per_s is None else f"above {_n(s.lower_per_s)} req/s (the most a point that kept up " \
                                             "reached) and "
    return (f"{below}below {_n(s.upper_per_s)} req/s offered ({over.load_point or over.phase}: {over.why}); "
            f"{len(s.points)} of {s.planned_points} points sent")


def opening_lines(cost: CostReport | None, arm: str) -> list[str]:
    """The arm's "Saturates" line per series (none without a series)."""
    return [f"Saturates ({s.phase}): {bound(s)}" for s in (cost.saturation if cost else []) if s.arm == arm]


def _x(s: SaturationSeries, phase: PhaseCost) -> float | None:
    """A point on the load axis: its offered rate; point 0 (one at a time) at the throughput it reached."""
    return phase.offered_rate_per_s if phase.offered_rate_per_s is not None else phase.request_throughput_per_s.avg


def section(cost: CostReport | None, cells: list[Cell]) -> list[str]:
    if cost is None or not cost.saturation:
        return []
    out = ["## Cost against load, to saturation", "",
           "Each series' points (load.series): point 0 one request at a time, then offered rates spaced by "
           "Little's law from its latency; a point over-saturates when its answers fall behind its arrivals by more "
           "than the tolerance while the wait (time to first token, from the scheduled send) grows, and the series "
           "stops there. Throughput, latency and time to first token: the geometric mean over the windows with the "
           "95 % t interval of their logs; divergence: the probes' rate with its 95 % bounds.", ""]
    phases = {(c.arm, c.phase): c for c in cost.phases}
    for s in cost.saturation:
        out += [f"**{s.arm}** ({s.phase}): saturates {bound(s)}", "",
                "| point | offered (req/s) | throughput (req/s) | latency (s) | time to first token (s) | divergent "
                "(95 %) | answers / arrivals | verdict |", "|" + " --- |" * 8]
        for p in s.points:
            c = phases[(s.arm, p.phase)]
            k, n, low, high, _ = stays_correct(cells, s.arm, p.phase)
            out.append(f"| {p.phase} | {_n(p.offered_rate_per_s) if p.offered_rate_per_s else ONE_AT_A_TIME} | "
                       f"{_interval(c.per_window['request_throughput_per_s'])} | "
                       f"{_interval(c.per_window['latency_s'])} | {_interval(c.per_window['time_to_first_token_s'])} | "
                       f"{k} of {n} ({100 * low:.2g}-{100 * high:.2g} %) | "
                       f"{'-' if p.answer_share is None else f'{p.answer_share:.0%}'} | "
                       f"{'over-saturated' if p.over_saturated else 'kept up'}: {p.why} |")
        out.append("")
    return out


def charts(cost: CostReport | None, cells: list[Cell]) -> list[str]:
    """Per arm and series: throughput, latency and divergence rate against offered load, the bound shaded."""
    out = []
    for s in (cost.saturation if cost else []):
        mine = [c for c in cost.phases if c.arm == s.arm and c.phase in {p.phase for p in s.points}] if cost else []
        panels: list[tuple[str, list[tuple[float, float, float | None, float | None]]]] = []
        for caption, metric in (("throughput (req/s)", "request_throughput_per_s"), ("latency (s)", "latency_s")):
            rows = [(x, *window_interval(c.per_window[metric])) for c in mine if (x := _x(s, c)) is not None]
            panels.append((caption, [(x, m, lo, hi) for x, m, lo, hi in rows if m is not None]))
        rates = [(x, stays_correct(cells, s.arm, c.phase)) for c in mine if (x := _x(s, c)) is not None]
        panels.append(("divergence rate", [(x, k / n, low, high) for x, (k, n, low, high, _) in rates if n]))
        out.append(svg.against_load(f"{s.arm} ({s.phase}): cost against offered load, to saturation", panels,
                                    (s.lower_per_s, s.upper_per_s)))
    return [c for c in out if c]
