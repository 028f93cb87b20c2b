"""Where divergence starts: a Bayesian change point over counts on an ordered axis (docs/onset.md).

The axis is a grid of m points x_0 < ... < x_{m-1}. The onset tau in 0..m is the index of the first point
above the change: points below it diverge at rate p0, points at or above it at p1 (tau = m: no onset in
range; tau = 0: the whole range is above it). With Beta priors on p0 and p1, integrated out in closed form
(Beta-Binomial marginals), the posterior over tau is exact. The next points are those that most reduce its
entropy (expected information gain over the Beta-Binomial predictive), several per round chosen greedily
over the earlier picks' possible outcomes. Waeber, Frazier and Henderson (2013) and hauntsaninja/git_bayesect
are the ideas' sources; this is the project's own code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.stats import ALPHA, clopper_pearson, distribution_test

# Prior mass of "no change in range" (tau = m) and of "changed before the range" (tau = 0), each; the rest is
# spread over the m - 1 places between grid points by the width each covers (Priors.places; equal by default).
# Uniform over all m + 1 would give "no onset" 1/(m+1).
PRIOR_OUTSIDE = 0.25
MAX_FANTASIES = 32  # outcome combinations of a round's earlier picks that the next pick is averaged over
FANTASY_MASS = 0.999  # ... the most likely ones, until this much of their probability is covered
OUTCOME_BINS = 6  # a pick's outcomes k of n are lumped into this many quantile bins for those combinations


@dataclass(frozen=True)
class Observation:
    """One job at grid index `index`: `k` divergent of `n`."""

    index: int
    k: int
    n: int


@dataclass(frozen=True)
class Priors:
    below: tuple[float, float] = (1.0, 4.0)  # Beta(a, b) of the rate below the onset: mostly repeatable
    above: tuple[float, float] = (1.0, 1.0)  # of the rate at and above it: anything
    # the width of each place tau = 1..m-1 (between grid points tau - 1 and tau) in the axis's measure, e.g.
    # log x on a log axis: the onset's prior is uniform in that measure; None: every place alike
    places: tuple[float, ...] | None = None


def lgamma(x: np.ndarray) -> np.ndarray:
    """log Gamma of positive x, vectorised: shifted to x >= 8 by the recurrence, then Stirling's series
    (absolute error below 1e-12 there)."""
    y = np.asarray(x, dtype=float).copy()
    acc = np.zeros_like(y)
    small = y < 8.0
    while small.any():
        acc[small] -= np.log(y[small])
        y[small] += 1.0
        small = y < 8.0
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))
    out: np.ndarray = acc + (y - 0.5) * np.log(y) - y + 0.5 * math.log(2 * math.pi) + series
    return out


def _betaln(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = lgamma(a) + lgamma(b) - lgamma(a + b)
    return out


def log_marginal(k: np.ndarray, n: np.ndarray, prior: tuple[float, float]) -> np.ndarray:
    """log of the probability of the exact sequence of outcomes: k of n under p ~ Beta(a, b), p integrated
    out (the Beta-Binomial without its binomial coefficient, which no hypothesis changes)."""
    a, b = prior
    a_all, b_all = np.full_like(k, a, dtype=float), np.full_like(k, b, dtype=float)
    out: np.ndarray = _betaln(a + k, b + n - k) - _betaln(a_all, b_all)
    return out


def counts(m: int, observations: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
    """Divergent and total requests per grid index (jobs at one index pooled)."""
    k, n = np.zeros(m), np.zeros(m)
    for o in observations:
        k[o.index] += o.k
        n[o.index] += o.n
    return k, n


def tau_prior(m: int, places: Sequence[float] | None = None) -> np.ndarray:
    """P(tau) for tau in 0..m: PRIOR_OUTSIDE at each end, the rest by the width of each place."""
    prior = np.full(m + 1, PRIOR_OUTSIDE)
    if m == 1:
        prior[:] = 0.5
    elif m > 1:
        prior[1:m] = (1.0 - 2 * PRIOR_OUTSIDE) * place_weights(m, places) / (m - 1)
    return prior


def place_weights(m: int, places: Sequence[float] | None) -> np.ndarray:
    """The places' relative widths, scaled to mean 1 (all ones without `places`)."""
    if places is None:
        return np.ones(m - 1)
    w = np.asarray(places, dtype=float)
    assert len(w) == m - 1 and (w > 0).all(), "one positive width per place between grid points"
    out: np.ndarray = w * (m - 1) / w.sum()
    return out


def _sides(m: int, observations: Sequence[Observation]) -> tuple[np.ndarray, ...]:
    """For each tau in 0..m: (k, n) pooled below it and at or above it."""
    k, n = counts(m, observations)
    kb = np.concatenate([[0.0], np.cumsum(k)])
    nb = np.concatenate([[0.0], np.cumsum(n)])
    return kb, nb, kb[-1] - kb, nb[-1] - nb


def log_posterior(m: int, observations: Sequence[Observation], priors: Priors) -> np.ndarray:
    """Unnormalised log posterior over tau in 0..m."""
    kb, nb, ka, na = _sides(m, observations)
    out: np.ndarray = (np.log(tau_prior(m, priors.places)) + log_marginal(kb, nb, priors.below)
                       + log_marginal(ka, na, priors.above))
    return out


def posterior(m: int, observations: Sequence[Observation], priors: Priors) -> np.ndarray:
    log_post = log_posterior(m, observations, priors)
    weights: np.ndarray = np.exp(log_post - log_post.max())
    out: np.ndarray = weights / weights.sum()
    return out


def entropy(p: np.ndarray) -> float:
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def _log_choose(n: int, k: np.ndarray) -> np.ndarray:
    out: np.ndarray = lgamma(np.full_like(k, n + 1.0)) - lgamma(k + 1.0) - lgamma(n - k + 1.0)
    return out


def _predictive(k: int, n: int, side_k: np.ndarray, side_n: np.ndarray, prior: tuple[float, float]) -> np.ndarray:
    """P(k of n at one more point | that point is on this side of tau), for every tau: Beta-Binomial with the
    side's posterior Beta."""
    a, b = prior[0] + side_k, prior[1] + side_n - side_k
    log_p = (_log_choose(n, np.array([float(k)]))[0] + _betaln(a + k, b + n - k) - _betaln(a, b))
    out: np.ndarray = np.exp(log_p)
    return out


def information_gain(m: int, observations: Sequence[Observation], priors: Priors, n: int) -> np.ndarray:
    """Expected reduction of the entropy of tau from one more job of n requests at each grid index j.

    For outcome k, the updated weight of tau is post(tau) * q(tau, k), with q the below-side predictive when
    j < tau and the above-side one otherwise; prefix sums over tau give every j at once: O(m n)."""
    post = posterior(m, observations, priors)
    kb, nb, ka, na = _sides(m, observations)
    expected_h = np.zeros(m)
    for k in range(n + 1):
        below = post * _predictive(k, n, kb, nb, priors.below)  # tau > j: j is below the change
        above = post * _predictive(k, n, ka, na, priors.above)  # tau <= j
        below_xlogx, above_xlogx = _xlogx(below), _xlogx(above)
        # sums over tau > j (suffix from j+1) and tau <= j (prefix through j), for j in 0..m-1
        z = _suffix(below)[1:m + 1] + np.cumsum(above)[:m]
        s = _suffix(below_xlogx)[1:m + 1] + np.cumsum(above_xlogx)[:m]
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.where(z > 0, np.log(np.where(z > 0, z, 1.0)) - s / np.where(z > 0, z, 1.0), 0.0)
        expected_h += z * h  # P(k) * H(tau | k)
    gain: np.ndarray = entropy(post) - expected_h
    return gain


def _xlogx(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)
    return out


def _suffix(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.cumsum(x[::-1])[::-1]
    return out


def predictive_outcomes(m: int, observations: Sequence[Observation], priors: Priors, index: int,
                        n: int) -> np.ndarray:
    """P(k of n) for k = 0..n at grid index `index`, over the posterior of tau."""
    post = posterior(m, observations, priors)
    kb, nb, ka, na = _sides(m, observations)
    below = np.arange(m + 1) > index
    return np.array([float((post * np.where(below, _predictive(k, n, kb, nb, priors.below),
                                             _predictive(k, n, ka, na, priors.above))).sum())
                     for k in range(n + 1)])


def choose_points(m: int, observations: Sequence[Observation], priors: Priors, n: int, count: int) -> list[int]:
    """`count` distinct grid indices for the next round, greedily: each maximises the information gain
    averaged over the likely outcomes of the picks before it (the most probable combinations, up to
    MAX_FANTASIES covering FANTASY_MASS of their probability)."""
    picks: list[int] = []
    fantasies: list[tuple[float, list[Observation]]] = [(1.0, list(observations))]
    for _ in range(min(count, m)):
        gain = sum(w * information_gain(m, obs, priors, n) for w, obs in fantasies)
        gain = np.asarray(gain, dtype=float)
        gain[picks] = -np.inf
        pick = int(np.argmax(gain))
        picks.append(pick)
        grown = [(w * p, [*obs, Observation(pick, k, n)])
                 for w, obs in fantasies
                 for k, p in outcome_bins(predictive_outcomes(m, obs, priors, pick, n))]
        grown.sort(key=lambda item: -item[0])
        kept: list[tuple[float, list[Observation]]] = []
        mass, total = 0.0, sum(w for w, _ in grown)
        for w, obs in grown:
            if len(kept) >= MAX_FANTASIES or mass >= FANTASY_MASS * total:
                break
            kept.append((w, obs))
            mass += w
        fantasies = [(w / mass, obs) for w, obs in kept]
    return picks


def outcome_bins(p: np.ndarray) -> list[tuple[int, float]]:
    """The outcomes k = 0..n with probabilities p, lumped into OUTCOME_BINS quantile bins, each as (its mean
    k, its probability): a pick whose outcome spreads over many k (a rate near 1/2 at large n) then stays one
    likely fantasy rather than many unlikely ones that the MAX_FANTASIES cut would drop."""
    mid = np.cumsum(p) - p / 2
    bins = np.minimum((mid / p.sum() * OUTCOME_BINS).astype(int), OUTCOME_BINS - 1)
    out = []
    for b in np.unique(bins[p > 0]):
        inside = (bins == b) & (p > 0)
        mass = float(p[inside].sum())
        out.append((round(float((np.flatnonzero(inside) * p[inside]).sum()) / mass), mass))
    return out


def spread_points(m: int, count: int, positions: Sequence[float] | None = None) -> list[int]:
    """A first round without data: grid indices evenly spaced in `positions` (the grid in the axis's measure,
    e.g. log x; None: the indices themselves), the ends included from two points on (what the information
    gain picks under the prior, without assuming a job's n)."""
    count = min(count, m)
    if count < 1:
        return []
    if count == 1:
        return [(m - 1) // 2 if positions is None else _nearest(positions, (positions[0] + positions[-1]) / 2)]
    if positions is None:
        return sorted({round(i * (m - 1) / (count - 1)) for i in range(count)})
    step = (positions[-1] - positions[0]) / (count - 1)
    return sorted({_nearest(positions, positions[0] + i * step) for i in range(count)})


def _nearest(positions: Sequence[float], target: float) -> int:
    return int(np.argmin(np.abs(np.asarray(positions, dtype=float) - target)))


@dataclass(frozen=True)
class Interval:
    """The shortest run of consecutive tau holding at least `confidence` of the posterior: the onset lies
    after grid index lo - 1 and at or before index hi (lo = 0: before the range; hi = m: past it)."""

    lo: int
    hi: int
    mass: float


def credible_interval(post: np.ndarray, confidence: float) -> Interval:
    cum = np.concatenate([[0.0], np.cumsum(post)])
    best: Interval | None = None
    hi = 0
    for lo in range(len(post)):
        hi = max(hi, lo)
        while hi < len(post) - 1 and cum[hi + 1] - cum[lo] < confidence:
            hi += 1
        mass = float(cum[hi + 1] - cum[lo])
        if mass < confidence - 1e-12:
            break
        if best is None or hi - lo < best.hi - best.lo:
            best = Interval(lo, hi, mass)
    assert best is not None
    return best


@dataclass(frozen=True)
class Rate:
    k: int
    n: int
    lower: float
    upper: float

    @property
    def rate(self) -> float | None:
        return self.k / self.n if self.n else None


def pooled_rate(k: np.ndarray, n: np.ndarray, confidence: float) -> Rate:
    kk, nn = int(k.sum()), int(n.sum())
    lower, upper = clopper_pearson(kk, nn, confidence)
    return Rate(kk, nn, lower, upper)


@dataclass(frozen=True)
class Islands:
    """Two change points against one, over the observed points (rates Beta(1, 1) in both models)."""

    bayes_factor: float  # evidence of two change points / evidence of one
    segments: tuple[tuple[int, int], ...]  # the most probable two-change split: (first, last) observed index
    rates: tuple[float | None, float | None, float | None]  # pooled k/n of each segment
    # the middle segment's rate is above both sides or below both, and the last side's rate is compatible with
    # the first's (the exact test of their counts shows no difference): the rate returns to the base rate. A rate
    # that rises, then falls to somewhere between (a modal count once most of a batch changed) is not an island.
    island: bool


def islands(m: int, observations: Sequence[Observation], places: Sequence[float] | None = None) -> Islands | None:
    """Evidence for "not monotone": a two-change model (rates a, b, c on three segments) against the
    one-change model, both with priors on their change places by the places' widths (as tau_prior; each end
    weighs as an average place). The likelihood only depends on how many observed points fall on each side,
    so both sums run over the observed points."""
    k_all, n_all = counts(m, observations)
    seen = np.flatnonzero(n_all)
    if len(seen) < 3:
        return None
    k, n = k_all[seen], n_all[seen]
    u = len(seen)
    # tau values with exactly s observed points below them: between observed points s-1 and s; their prior
    # weight (sum) and sum of squared weights (for two changes in one gap, tau1 <= tau2)
    edges = np.concatenate([[-1], seen, [m]]) + 1
    w = np.concatenate([[1.0], place_weights(m, places) if m > 1 else [], [1.0]])
    cw, cq = np.concatenate([[0.0], np.cumsum(w)]), np.concatenate([[0.0], np.cumsum(w * w)])
    width, square = cw[edges[1:]] - cw[edges[:-1]], cq[edges[1:]] - cq[edges[:-1]]  # s = 0..u
    kc, nc = np.concatenate([[0.0], np.cumsum(k)]), np.concatenate([[0.0], np.cumsum(n)])
    flat = (1.0, 1.0)

    def seg(a: int, b: int) -> float:  # observed points a..b-1
        return float(log_marginal(np.array([kc[b] - kc[a]]), np.array([nc[b] - nc[a]]), flat)[0])

    one = [math.log(width[s]) + seg(0, s) + seg(s, u) for s in range(u + 1)]
    log_one = _logsumexp(one) - math.log(cw[-1])
    two: dict[tuple[int, int], float] = {}
    for s1 in range(u + 1):
        for s2 in range(s1, u + 1):
            pairs = width[s1] * width[s2] if s1 < s2 else (width[s1] ** 2 + square[s1]) / 2
            two[(s1, s2)] = math.log(pairs) + seg(0, s1) + seg(s1, s2) + seg(s2, u)
    log_two = _logsumexp(list(two.values())) - math.log((cw[-1] ** 2 + cq[-1]) / 2)
    s1, s2 = max(two, key=lambda key: two[key])
    parts = ((0, s1), (s1, s2), (s2, u))
    rates = tuple(None if nc[b] == nc[a] else float((kc[b] - kc[a]) / (nc[b] - nc[a])) for a, b in parts)
    ra, rb, rc = rates
    first, last = ((int(kc[b] - kc[a]), int(nc[b] - nc[a])) for a, b in (parts[0], parts[2]))
    island = None not in rates and (rb - ra) * (rb - rc) > 0 and returns(first, last)  # type: ignore[operator]
    segments = tuple((int(seen[a]), int(seen[b - 1])) if b > a else (-1, -1) for a, b in parts)
    return Islands(math.exp(min(log_two - log_one, 700.0)), segments, (ra, rb, rc), bool(island))


def returns(base: tuple[int, int], later: tuple[int, int]) -> bool:
    """Whether a later segment's k of n is compatible with the base segment's: the exact test of the two shows
    no difference at stats.ALPHA."""
    (k0, n0), (k1, n1) = base, later
    return distribution_test([k0, n0 - k0], [k1, n1 - k1]).p_value >= ALPHA


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))
