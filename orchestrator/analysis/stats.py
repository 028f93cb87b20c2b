"""Confidence bounds for divergence rates. Exact (Clopper-Pearson), no SciPy needed."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

CONFIDENCE = 0.95


def upper_bound_zero(n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided upper bound on the rate when 0 of n diverged: 1 - (1 - c)^(1/n). n=30 -> 0.0950."""
    if n <= 0:
        return 1.0
    return float(1.0 - (1.0 - confidence) ** (1.0 / n))


def repeats_for_bound(bound: float, confidence: float = CONFIDENCE) -> int:
    """The fewest requests whose zero-divergence upper bound is at most `bound`: the inverse of
    upper_bound_zero. 0.01 -> 299, 0.05 -> 59."""
    n = max(1, math.ceil(math.log(1.0 - confidence) / math.log1p(-bound)))
    while upper_bound_zero(n, confidence) > bound:  # the float division may land one short
        n += 1
    return n


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), as in Numerical Recipes. Its two
    steps a term written out, and |v| > tiny as two comparisons: the same arithmetic at half the interpreter's
    cost (a report's bounds make thousands of these calls)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if d > tiny or d < -tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        numerator = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + numerator * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + numerator / c
        c = c if c > tiny or c < -tiny else tiny
        h *= d * c
        numerator = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + numerator * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + numerator / c
        c = c if c > tiny or c < -tiny else tiny
        h *= d * c
        if -1e-15 < d * c - 1.0 < 1e-15:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """Inverse of beta_cdf by bisection (monotone, so 200 halvings reach double precision)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (q > 0.5) from the incomplete beta: P(|T| > t) = I_x(df/2, 1/2), x = df/(df+t^2)."""
    x = beta_ppf(2 * (1 - q), df / 2, 0.5)
    return math.sqrt(df * (1 - x) / x)


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Two-sided exact interval for k divergent of n: the Beta quantiles of Clopper and Pearson. Cached:
    a study's cells share n (its repeats) and few values of k, and each interval costs ~100 beta_cdf calls."""
    if n <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    lower = 0.0 if k == 0 else beta_ppf(alpha / 2, k, n - k + 1)
    upper = 1.0 if k == n else beta_ppf(1 - alpha / 2, k + 1, n - k)
    return lower, upper


def divergence_bound(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(lower, upper) on the divergence rate: one-sided when k == 0, Clopper-Pearson otherwise."""
    return (0.0, upper_bound_zero(n, confidence)) if k == 0 else clopper_pearson(k, n, confidence)


def stopped_lower_bound(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """Lower bound on the divergence rate of a cell stopped at its k-th divergence by request n
    (protocol.stop_after_divergences). Under inverse (negative binomial) sampling P(stopped by n) =
    P(Binomial(n, p) >= k) rises with p, so the rate whose chance of stopping this early is (1 - c)/2 bounds it
    below: the same Beta quantile as Clopper-Pearson's lower end. No upper bound is given: a stopped cell
    estimates nothing beyond "the rate is at least this" (docs/usage.md)."""
    return clopper_pearson(k, n, confidence)[0] if 0 < k <= n else 0.0


POOLED_ASSUMPTION = "assumes one common divergence rate across the pooled cells"


@dataclass(frozen=True)
class PooledRate:
    """A divergence rate bounded over several cells together, with the assumption that makes it valid."""

    divergent: int
    n: int
    lower_bound_95: float
    upper_bound_95: float
    assumption: str = POOLED_ASSUMPTION


def pooled_bound(divergent: list[int], n: list[int], confidence: float = CONFIDENCE) -> PooledRate:
    """Bound over several cells together; only valid under POOLED_ASSUMPTION, which travels with it."""
    k, total = sum(divergent), sum(n)
    lower, upper = divergence_bound(k, total, confidence)
    return PooledRate(k, total, lower, upper)


# Two cells' signature distributions (analysis/compare.py): "differ" below this p-value, per cell pair.
ALPHA = 0.05
EXACT_TABLES = 20_000  # past this many 2 x k tables with the cells' totals, the p-value is estimated instead
PERMUTATIONS = 10_000
PERMUTATION_SEED = 0


@dataclass(frozen=True)
class DistributionTest:
    """Whether two samples of signatures come from one distribution: the p-value and how it was found."""

    p_value: float
    method: str  # "Fisher-Freeman-Halton exact test", or its estimate by permutations (number and seed stated)


def proportional(a: list[int], b: list[int]) -> bool:
    """The same categories in the same proportions (counts a[j], b[j] of category j)."""
    na, nb = sum(a), sum(b)
    return na > 0 and nb > 0 and all(x * nb == y * na for x, y in zip(a, b, strict=True))


def distribution_test(a: list[int], b: list[int]) -> DistributionTest:
    """Fisher-Freeman-Halton's test of the 2 x k table (counts a[j], b[j] of category j): given the margins,
    the chance of a table no more likely than the one observed. Exact (integer weights, no ties lost to
    rounding) while there are at most EXACT_TABLES tables, else estimated from PERMUTATIONS random splits of
    the pooled sample (seed PERMUTATION_SEED, so a report is re-made with the same p-value)."""
    columns = [x + y for x, y in zip(a, b, strict=True)]
    if all(x in (0, c) for x, c in zip(a, columns, strict=True)):  # no signature on both sides
        return DistributionTest(_disjoint_tail(columns, sum(a)), "Fisher-Freeman-Halton exact test")
    if _tables(columns, sum(a)) <= EXACT_TABLES:
        observed = math.prod(math.comb(c, x) for c, x in zip(columns, a, strict=True))
        return DistributionTest(_exact_tail(columns, sum(a), observed), "Fisher-Freeman-Halton exact test")
    return DistributionTest(_permutation_tail(columns, a),
                            f"Fisher-Freeman-Halton test, {PERMUTATIONS} permutations (seed {PERMUTATION_SEED})")


def _tables(columns: list[int], row: int) -> float:
    """How many first rows the exact test would list: categories of more than one request, convolved (their
    partial sums), with those seen once (weight 1 either way) counted together."""
    import numpy as np  # the sums of partial rows, as floats: an estimate of the work is all this needs

    ways = np.ones(1)
    for c in (c for c in columns if c > 1):
        ways = np.convolve(ways, np.ones(c + 1))[:row + 1]
    return float(ways[max(0, row - columns.count(1)):].sum())


def _disjoint_tail(columns: list[int], row: int) -> float:
    """The p-value where no signature is on both sides: that table has weight 1, the least any table has, so
    the tail is every table of weight 1 (each signature wholly on one side): the subsets of signatures whose
    counts add up to `row`, over C(N, row). Exact, and cheap where listing the tables is not."""
    import numpy as np  # Python ints in an object array: exact counts, added a column at a time

    singles = columns.count(1)
    subsets = np.zeros(row + 1, dtype=object)  # subsets of the signatures seen more than once, by requests held
    subsets[0] = 1
    reach = 0  # the most requests the subsets so far hold: past it every count is 0, not worth adding
    for c in (c for c in columns if c > 1 and c <= row):
        reach = min(row, reach + c)
        subsets[c:reach + 1] = subsets[c:reach + 1] + subsets[:reach + 1 - c]
    ways = sum(int(subsets[total]) * math.comb(singles, row - total)
               for total in range(max(0, row - singles), row + 1))
    return min(1.0, ways / _comb(sum(columns), row))


@functools.lru_cache(maxsize=256)
def _comb(n: int, k: int) -> int:
    """C(n, k), kept: a study's pairs mostly share their totals (cells of one size), and at a thousand requests a
    side this is a 600-digit integer that takes longer to make than the rest of a disjoint pair's test."""
    return math.comb(n, k)


def _exact_tail(columns: list[int], row: int, observed: int) -> float:
    """Sum of the weights prod C(c_j, x_j) of every first row x (sum row) no heavier than `observed`, over
    C(N, row); partial tables with the same sum and weight are merged, and categories seen once are counted
    together at the end (C(singles, m) ways, weight 1)."""
    states: dict[tuple[int, int], int] = {(0, 1): 1}  # (requests so far, weight so far) -> tables
    singles = columns.count(1)
    left = sum(columns)
    for c in sorted((c for c in columns if c > 1), reverse=True):
        left -= c
        merged: dict[tuple[int, int], int] = {}
        for (total, weight), tables in states.items():
            for x in range(max(0, row - total - left), min(c, row - total) + 1):
                key = (total + x, weight * math.comb(c, x))
                merged[key] = merged.get(key, 0) + tables
        states = merged
    tail = sum(weight * tables * math.comb(singles, row - total) for (total, weight), tables in states.items()
               if weight <= observed)
    return min(1.0, tail / _comb(sum(columns), row))


def _permutation_tail(columns: list[int], a: list[int]) -> float:
    """The share of random splits of the pooled sample whose table is no more likely than the observed one,
    counting the observed split itself ((1 + hits) / (1 + PERMUTATIONS)). A split's first row is drawn from
    the multivariate hypergeometric distribution, which is what relabelling the pooled requests gives."""
    import numpy as np  # only for large tables

    counts = np.array(columns)
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, counts.max() + 1)))])
    offsets = np.concatenate([[0], np.cumsum(counts + 1)[:-1]])
    c = np.repeat(counts, counts + 1)
    x = np.arange(int((counts + 1).sum())) - np.repeat(offsets, counts + 1)
    table = log_factorial[c] - log_factorial[x] - log_factorial[c - x]  # log C(c_j, x) for every j and x
    observed = float(table[offsets + np.array(a)].sum())
    # numpy's two samplers: per request ("count") is the faster where most signatures are seen once or twice
    rng = np.random.default_rng(PERMUTATION_SEED)
    rows = rng.multivariate_hypergeometric(columns, sum(a), size=PERMUTATIONS, method="count") \
        if sum(columns) < 8 * len(columns) else rng.multivariate_hypergeometric(columns, sum(a), size=PERMUTATIONS)
    weights = table[offsets + rows].sum(axis=1)
    hits = int((weights <= observed + 1e-9 * max(1.0, abs(observed))).sum())
    return (1 + hits) / (1 + PERMUTATIONS)
