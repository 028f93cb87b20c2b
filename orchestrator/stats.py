"""Confidence bounds for divergence rates. Exact (Clopper-Pearson), no SciPy needed."""

from __future__ import annotations

import math
from collections.abc import Callable

CONFIDENCE = 0.95


def upper_bound_zero(n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided upper bound on the rate when 0 of n diverged: 1 - (1 - c)^(1/n). n=30 -> 0.0950."""
    if n <= 0:
        return 1.0
    return 1.0 - (1.0 - confidence) ** (1.0 / n)


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k + 1)]
    peak = max(terms)
    return min(1.0, math.exp(peak) * sum(math.exp(t - peak) for t in terms))


def _solve(f: Callable[[float], float], target: float) -> float:
    lo, hi = 0.0, 1.0  # f decreasing in p
    for _ in range(100):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Two-sided exact interval for k divergent of n."""
    if n <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    lower = 0.0 if k == 0 else _solve(lambda p: _binom_cdf(k - 1, n, p), 1 - alpha / 2)
    upper = 1.0 if k == n else _solve(lambda p: _binom_cdf(k, n, p), alpha / 2)
    return lower, upper


def divergence_bound(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(lower, upper) on the divergence rate: one-sided when k == 0, Clopper-Pearson otherwise."""
    return (0.0, upper_bound_zero(n, confidence)) if k == 0 else clopper_pearson(k, n, confidence)


POOLED_ASSUMPTION = "assumes one common divergence rate across the pooled cells"


def pooled_bound(divergent: list[int], n: list[int], confidence: float = CONFIDENCE) -> dict[str, object]:
    """Bound over several cells together; only valid under POOLED_ASSUMPTION, which travels with it."""
    k, total = sum(divergent), sum(n)
    lower, upper = divergence_bound(k, total, confidence)
    return {"divergent": k, "n": total, "lower_bound_95": lower, "upper_bound_95": upper,
            "assumption": POOLED_ASSUMPTION}
