"""A load phase's series to saturation (`load.series`, docs/load.md "To saturation"): the phase expanded into its
load points, named PHASE@K, and the offered rate of each point, spaced by Little's law.

Point 0 is a closed loop of one request at a time: it measures the single-request latency L. Point K >= 1 offers
m_K / L requests/s, m_K = in_flight^(K / (points - 1)): geometric steps from one request in flight (1/L, what
point 0 already ran at) up to `in_flight` in flight at that latency, the capacity estimate (as vLLM's
`bench sweep serve_workload` spaces its levels between a serial and a batch run). Until L is measured a later
point holds m_K as its placeholder rate (a rate in units of 1/L): its requests, probes and order are the same at
any rate (the schedule draws each gap as a unit draw over the rate), so only its send times change once L is
known (run/send/series.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from orchestrator.config.schema import LoadConfig, LoadSeriesConfig, PhaseConfig, PhaseKind

MARK = "@"  # PHASE@K: the K-th point of the phase's series, as the record's `phase` names it


def point_name(phase: str, k: int) -> str:
    return f"{phase}{MARK}{k}"


def parse(phase: str) -> tuple[str, int] | None:
    """(series phase, K) of a point's name; None for a phase that is no series' point."""
    base, mark, k = phase.rpartition(MARK)
    return (base, int(k)) if mark and base and k.isdigit() else None


def base_name(phase: str) -> str:
    """The phase as the config names it: a point's series, else the phase itself."""
    point = parse(phase)
    return point[0] if point else phase


def multiplier(k: int, series: LoadSeriesConfig) -> float:
    """Point K's requests in flight at the single-request latency: its offered rate times L."""
    return float(series.in_flight ** (k / (series.points - 1)))


def offered_rate_per_s(k: int, series: LoadSeriesConfig, latency_s: float) -> float:
    return multiplier(k, series) / latency_s


def is_series(phase: PhaseConfig) -> bool:
    return phase.kind is PhaseKind.load and phase.load.series.points >= 2


def expand(phases: dict[str, PhaseConfig]) -> dict[str, PhaseConfig]:
    """Each series phase as its points, in order (point K >= 1 at its placeholder rate m_K); other phases as
    they are."""
    out: dict[str, PhaseConfig] = {}
    for name, phase in phases.items():
        if not is_series(phase):
            out[name] = phase
            continue
        for k in range(phase.load.series.points):
            out[point_name(name, k)] = dataclasses.replace(phase, load=point_load(phase.load, k))
    return out


def settings(phases: dict[str, PhaseConfig], requests: Callable[[PhaseConfig], int]) -> dict[str, dict[str, Any]]:
    """What run.json keeps of each series (`sample_size.series`, read by analysis/saturation.py): its points'
    phases, the stop's tolerance, the `requests` of one point (those after the stop are never sent: no row, and
    nothing for `run --resume`)."""
    return {name: {"points": [point_name(name, k) for k in range(p.load.series.points)],
                   "tolerance": p.load.series.tolerance,
                   "point_requests": requests(expand({name: p})[point_name(name, 0)])}
            for name, p in phases.items() if is_series(p)}


def point_load(load: LoadConfig, k: int, latency_s: float = 1.0) -> LoadConfig:
    """Point K's load: point 0 a closed loop of one; a later one the series' arrivals at its offered rate (at the
    default latency of 1 s: its placeholder, m_K), to three significant digits, with no concurrency ceiling."""
    single = LoadSeriesConfig()
    if k == 0:
        return dataclasses.replace(load, rate_per_s=None, concurrency=1, series=single)
    rate = float(f"{offered_rate_per_s(k, load.series, latency_s):.3g}")  # as the record's load point says it
    return dataclasses.replace(load, rate_per_s=rate, series=single)


def describe(load: LoadConfig) -> str:
    """How `plan` says a series is chosen."""
    s = load.series
    steps = ", ".join(f"{multiplier(k, s):.3g}/L" for k in range(1, s.points))
    return (f"a series to saturation of at most {s.points} points: point 0 one request at a time (its mean latency "
            f"L), then {load.arrivals.value} arrivals at {steps} requests/s (Little's law, up to {s.in_flight} in "
            f"flight at L); it stops after the first point whose answers fall behind its arrivals by more than "
            f"{s.tolerance:.0%} while the time to first token grows")


def problems(at: str, load: LoadConfig) -> list[tuple[str, object, str, str]]:
    """(field, value, what is valid, the fix) for each bad series setting (config/validate.py words them)."""
    s, found = load.series, list[tuple[str, object, str, str]]()
    if s.points == 0:
        return []
    if s.points < 2:
        found.append((f"{at}.series.points", s.points, "0 (no series) or >= 2 (point 0 and at least one rate)",
                      f"set {at}.series.points=5, or 0"))
    if load.rate_per_s is not None:
        found.append((f"{at}.rate_per_s", load.rate_per_s, "null with a series (its points' rates come from the "
                      "single-request latency)", f"set {at}.rate_per_s=null, or {at}.series.points=0"))
    if load.concurrency is not None:
        found.append((f"{at}.concurrency", load.concurrency, "null with a series (its points are open: a ceiling "
                      "would move their schedules and hide the backlog the stop looks for)",
                      f"set {at}.concurrency=null, or {at}.series.points=0"))
    if load.requests is None:
        found.append((f"{at}.requests", None, "a count per window with a series (a point's requests are planned "
                      "before its rate is known)", f"set {at}.requests=N and {at}.duration_s=null"))
    if s.in_flight < 2:
        found.append((f"{at}.series.in_flight", s.in_flight, ">= 2 (the last point's requests in flight at the "
                      "single-request latency)", f"e.g. {at}.series.in_flight=16"))
    if not 0 < s.tolerance < 1:
        found.append((f"{at}.series.tolerance", s.tolerance, "in (0, 1)", f"e.g. {at}.series.tolerance=0.1"))
    return found
