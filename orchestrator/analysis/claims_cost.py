"""A cost-ratio claim (docs/claims.md): B's cost at a load point is `claimed` times A's, within +-tolerance of it
(or at most, or at least it). Its interval is the report's B/A (analysis/pairing.py: paired over windows of one
schedule, else Welch's t on the windows' logs), made again at the claims' confidence from report.json's
`cost.phases` windows. Contradicted: the interval lies wholly outside the claimed band; replicated: wholly inside
it; else inconclusive. The windows that would settle it are an estimate: the pilot's spread of log ratios taken as
the truth's, and its ratio as the true one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis import claims, pairing
from orchestrator.analysis.claims import ClaimResult
from orchestrator.analysis.stats import t_quantile

ESTIMATE = ("an estimate from the pilot's variance: its spread of log ratios and its ratio taken as the truth's "
            "(power: the chance that many windows settle it, were they)")


@dataclass(frozen=True)
class RatioClaim:
    """B/A lies in [low, high] (at most: low 0; at least: high infinite); `logs`: its spread is of log ratios
    (a count claim's, analysis/claims_flips.py: of the counts themselves)."""

    low: float
    high: float
    confidence: float
    logs: bool = True

    def verdict(self, lower: float, upper: float) -> str:
        if upper < self.low or lower > self.high:
            return claims.CONTRADICTED
        return claims.REPLICATED if self.low <= lower and upper <= self.high else claims.INCONCLUSIVE

    def distance(self, ratio: float) -> float:
        """How far (in log, or plain) the value lies from the band's nearest finite edge: what to clear."""
        if not self.logs:
            return min(abs(ratio - edge) for edge in (self.low, self.high) if edge < math.inf)
        return min(abs(math.log(ratio) - math.log(edge)) for edge in (self.low, self.high) if 0 < edge < math.inf)

    def power(self, ratio: float, log_sd: float, windows: int) -> float:
        """The chance `windows` windows (a side) settle it, were the ratio and spread the pilot's (normal)."""
        if windows < 2:
            return 0.0
        margin = self.distance(ratio) * math.sqrt(windows) / log_sd - t_quantile(0.5 + self.confidence / 2,
                                                                                 windows - 1)
        return 0.5 * (1 + math.erf(margin / math.sqrt(2)))

    def windows_needed(self, ratio: float, log_sd: float, target: float) -> int | None:
        """The fewest windows (a side) at which that chance reaches `target`; None: the ratio on an edge."""
        if self.distance(ratio) == 0:
            return None
        return claims.fewest(lambda m: self.power(ratio, log_sd, m) >= target, claims.LIMIT_N)


def _windows(phases: list[dict[str, Any]], metric: str) -> tuple[list[int], list[float | None], list[str]]:
    ids: list[int] = []
    values: list[float | None] = []
    schedules: list[str] = []
    for run, phase in enumerate(phases):  # runs apart: window ids offset so windows of two runs never pair
        ids += [run * 1_000_000 + w for w in phase["window_ids"]]
        values += phase["per_window"][metric]
        schedules += phase["schedules"]
    return ids, values, schedules


def answer(name: str, claimed: str, source: str, test: RatioClaim, a: list[dict[str, Any]], b: list[dict[str, Any]],
           metric: str, target: float) -> ClaimResult:
    """The claim checked on A's and B's PhaseCost dicts at the load point (one a run), for `metric`."""
    found = pairing.window_ratio(*_windows(a, metric), *_windows(b, metric), test.confidence)
    counted = [sum(v is not None for v in _windows(side, metric)[1]) for side in (a, b)]
    unsteady = sorted({p["arm"] for p in (*a, *b) if not p["steady"]["steady"]})
    label = [f"{p['arm']}/{p['phase']} ({len(p['window_ids'])} windows)" for p in (*a, *b)]
    notes = [found.method, *([found.note] if found.note else [])]
    if unsteady:
        notes.append(f"no interval: {' and '.join(unsteady)} not steady (docs/load.md)")
    if found.value is None or found.lower is None or found.upper is None or unsteady:
        return ClaimResult(name, "cost_ratio", claimed, source, counted[1], counted[0], math.nan, math.nan,
                           claims.INCONCLUSIVE, 0.0, 0.0, math.nan, None, label, notes, scale="ratio",
                           estimate=found.value)
    needed = None if not found.log_sd else test.windows_needed(found.value, found.log_sd, target)
    chance = 1.0 if not found.log_sd else test.power(found.value, found.log_sd, min(counted))
    return ClaimResult(name, "cost_ratio", claimed, source, counted[1], counted[0], found.lower, found.upper,
                       test.verdict(found.lower, found.upper), chance, chance, math.nan, needed, label,
                       [*notes, f"windows that settle it: {ESTIMATE}"], scale="ratio", estimate=found.value)


def test_of(ratio: float | None, at_most: float | None, at_least: float | None, tolerance: float,
            confidence: float) -> tuple[RatioClaim, str]:
    """The claim's band and its words."""
    if ratio is not None:
        return (RatioClaim(ratio * (1 - tolerance), ratio * (1 + tolerance), confidence),
                f"B/A = {ratio:g} +- {100 * tolerance:g} %")
    if at_most is not None:
        return RatioClaim(0.0, at_most, confidence), f"B/A <= {at_most:g}"
    return RatioClaim(float(at_least or 0), math.inf, confidence), f"B/A >= {at_least:g}"

