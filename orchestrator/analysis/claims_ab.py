"""An A/B claim (docs/claims.md): B's divergence rate less A's is at most (or at least) `claimed`, false by `margin`
at the alternative. Its interval is rates.py's (Newcombe's hybrid score interval, as a report's rate comparison);
its power is exact: every (k_A, k_B) weighed by the two binomials, the baseline at the rate the claim states for
it (`baseline_rate`), B at that plus the alternative (or the claimed difference, for the assurance); n per arm."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.analysis import claims
from orchestrator.analysis.claims import ClaimResult, Evidence, fewest, first, tail
from orchestrator.analysis.rates import compare_rates, newcombe, z_of


@dataclass(frozen=True)
class DifferenceClaim:
    """p_B - p_A is at most `claimed` (at_least False) or at least it; A's rate taken as `baseline_rate`."""

    claimed: float
    at_least: bool
    margin: float
    confidence: float
    baseline_rate: float

    @property
    def alternative(self) -> float:
        return self.claimed - self.margin if self.at_least else self.claimed + self.margin

    def bounds(self, k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[float, float]:
        found = compare_rates(k_a, n_a, k_b, n_b, self.confidence)
        return found.lower_95, found.upper_95

    def _outside(self, lower: float, upper: float, value: float, claim_side: bool) -> bool:
        """The interval wholly outside the claim (claim_side) or wholly short of the alternative."""
        if claim_side:
            return upper < value if self.at_least else lower > value
        return lower > value if self.at_least else upper < value

    def verdict(self, k_a: int, n_a: int, k_b: int, n_b: int) -> str:
        if not n_a or not n_b:
            return claims.INCONCLUSIVE
        lower, upper = self.bounds(k_a, n_a, k_b, n_b)
        if self._outside(lower, upper, self.claimed, True):
            return claims.CONTRADICTED
        return claims.REPLICATED if self._outside(lower, upper, self.alternative, False) else claims.INCONCLUSIVE

    def _chance(self, n: int, difference: float, claim_side: bool) -> float:
        """P(the check lands outside the claim, or short of the alternative) with n a side, were B - A
        `difference`: over k_A, the k_B where it does (a run of k_B: the interval rises with k_B)."""
        p_a = self.baseline_rate
        p_b = min(1.0, max(0.0, p_a + difference))
        z = z_of(self.confidence)
        value = self.claimed if claim_side else self.alternative
        low_first = claim_side != self.at_least  # the region is k_B from a threshold up (else up to one)
        total = 0.0
        spread = 8 * math.sqrt(n * p_a * (1 - p_a)) + 1
        for k_a in range(max(0, int(n * p_a - spread)), min(n, int(n * p_a + spread)) + 1):
            weight = tail(k_a, n, p_a) - tail(k_a + 1, n, p_a)
            if weight <= 0:
                continue

            def inside(k_b: int, k_a: int = k_a) -> bool:
                _, lower, upper = newcombe(k_b, n, k_a, n, z)
                return self._outside(lower, upper, value, claim_side)

            if low_first:  # outside for k_B at or past the first k_B that is
                total += weight * tail(first(n, inside), n, p_b)
            else:  # outside for k_B below the first k_B that is not
                total += weight * (1.0 - tail(first(n, lambda k_b: not inside(k_b)), n, p_b))
        return min(1.0, total)

    def power(self, n: int) -> float:
        return self._chance(n, self.alternative, True)

    def assurance(self, n: int) -> float:
        return self._chance(n, self.claimed, False)

    def n_needed(self, target: float) -> int | None:
        return fewest(lambda n: self.power(n) >= target and self.assurance(n) >= target, claims.LIMIT_N)


def answer(name: str, claimed: str, source: str, test: DifferenceClaim, a: Evidence, b: Evidence, target: float
           ) -> ClaimResult:
    lower, upper = test.bounds(a.k, a.n, b.k, b.n) if a.n and b.n else (-1.0, 1.0)
    n = min(a.n, b.n)
    return ClaimResult(name, "ab_difference", claimed, source, b.k, b.n, lower, upper,
                       test.verdict(a.k, a.n, b.k, b.n), test.power(n), test.assurance(n), test.alternative,
                       test.n_needed(target), [*a.cells, *b.cells], [*a.notes, *b.notes], a.k, a.n)
