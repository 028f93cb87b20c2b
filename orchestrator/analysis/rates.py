"""Two arms' divergence rates compared (k of n each, from their cells): the difference with Newcombe's hybrid
score interval (his method 10, built from the two Wilson intervals), Fisher's exact test of the 2 x 2 table
(one-sided and two-sided) and a verdict on B against A. No SciPy."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.stats import CONFIDENCE

Z_95 = 1.959963984540054  # the standard normal's 0.975 quantile

LOWER, HIGHER, NOT_SHOWN = "lower", "higher", "not shown lower"


@dataclass(frozen=True)
class RateDifference:
    """B's divergence rate less A's, with its interval, the exact test, and what they say of B."""

    k_a: int
    n_a: int
    k_b: int
    n_b: int
    difference: float  # k_b/n_b - k_a/n_a
    lower_95: float
    upper_95: float
    p_lower: float  # Fisher's one-sided p-value for "B diverges less often than A"
    p_two_sided: float  # Fisher's two-sided p-value (tables no more likely than the one observed)
    verdict: str  # lower (interval wholly below 0), higher (wholly above), not shown lower
    method: str = "Newcombe's hybrid score interval (method 10); Fisher's exact test"


def wilson(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for k of n (no continuity correction); (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)


def newcombe(k_1: int, n_1: int, k_2: int, n_2: int, z: float = Z_95) -> tuple[float, float, float]:
    """(p1 - p2, lower, upper): Newcombe (1998), method 10, the hybrid of the two Wilson intervals."""
    p_1, p_2 = (k_1 / n_1 if n_1 else 0.0), (k_2 / n_2 if n_2 else 0.0)
    l_1, u_1 = wilson(k_1, n_1, z)
    l_2, u_2 = wilson(k_2, n_2, z)
    d = p_1 - p_2
    return d, d - math.sqrt((p_1 - l_1) ** 2 + (u_2 - p_2) ** 2), d + math.sqrt((u_1 - p_1) ** 2 + (p_2 - l_2) ** 2)


def fisher(k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[float, float]:
    """Fisher's exact test of the 2 x 2 table (divergent, not) x (A, B), margins fixed: the one-sided p-value
    that B diverges less often (P(X_B <= k_b)) and the two-sided one (every table no more likely than the one
    observed, within a relative 1e-7 as R's fisher.test, so equal tables tie). The hypergeometric weights
    come from their ratio recursion in logs: linear in the tables, where exact integers grow with n."""
    total = k_a + k_b
    low, high = max(0, total - n_a), min(n_b, total)
    x = np.arange(low, high)
    steps = np.log((n_b - x) * (total - x)) - np.log((x + 1) * (n_a - total + x + 1.0)) if len(x) else x
    log_weights = np.concatenate([[0.0], np.cumsum(steps)])
    weights = np.exp(log_weights - log_weights.max())
    whole = float(weights.sum())
    observed = weights[k_b - low]
    lower = float(weights[:k_b - low + 1].sum()) / whole
    two_sided = float(weights[weights <= observed * (1 + 1e-7)].sum()) / whole
    return min(1.0, lower), min(1.0, two_sided)


def compare_rates(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> RateDifference:
    """B against A: "lower" when the whole interval of p_B - p_A lies below 0, "higher" when above, else "not
    shown lower" (the data do not show B lower; it may still be, with more requests)."""
    d, low, high = newcombe(k_b, n_b, k_a, n_a, z_of(confidence))
    p_lower, p_two = fisher(k_a, n_a, k_b, n_b)
    verdict = LOWER if high < 0 else HIGHER if low > 0 else NOT_SHOWN
    return RateDifference(k_a, n_a, k_b, n_b, d, low, high, p_lower, p_two, verdict)


def z_of(confidence: float) -> float:
    """The two-sided interval's normal quantile for a confidence (0.95 -> 1.96)."""
    return Z_95 if confidence == CONFIDENCE else _normal_quantile(0.5 + confidence / 2)


def _normal_quantile(q: float) -> float:
    """The standard normal's quantile by bisection on erf (only for a confidence other than 95 %)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
