"""The onset change point (analysis/onset.py) against brute force: the posterior by explicit numerical
integration over the rates, the information gain by enumerating outcomes, and the interval and island rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.analysis import onset as o

PRIORS = o.Priors((1.0, 4.0), (1.0, 1.0))


def _binom_lik(k: int, n: int, p: float) -> float:
    return float(p ** k * (1 - p) ** (n - k))


def brute_posterior(m: int, obs: list[o.Observation], priors: o.Priors, steps: int = 4000) -> np.ndarray:
    """P(tau | data) with p0 and p1 integrated on a midpoint grid (no closed form used)."""
    p = (np.arange(steps) + 0.5) / steps

    def beta_pdf(a: float, b: float) -> np.ndarray:
        log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
        return np.exp((a - 1) * np.log(p) + (b - 1) * np.log(1 - p) - log_beta)

    pb, pa = beta_pdf(*priors.below), beta_pdf(*priors.above)
    out = []
    for tau in range(m + 1):
        below = np.prod([p ** x.k * (1 - p) ** (x.n - x.k) for x in obs if x.index < tau], axis=0) if any(
            x.index < tau for x in obs) else np.ones(steps)
        above = np.prod([p ** x.k * (1 - p) ** (x.n - x.k) for x in obs if x.index >= tau], axis=0) if any(
            x.index >= tau for x in obs) else np.ones(steps)
        out.append(o.tau_prior(m)[tau] * float((below * pb).mean()) * float((above * pa).mean()))
    arr = np.array(out)
    return arr / arr.sum()


def test_lgamma_matches_math() -> None:
    x = np.array([0.1, 0.5, 1.0, 2.5, 7.9, 8.0, 33.3, 1e4])
    assert np.allclose(o.lgamma(x), [math.lgamma(v) for v in x], atol=1e-10)


def test_posterior_matches_brute_force_integration() -> None:
    obs = [o.Observation(1, 0, 6), o.Observation(4, 3, 6), o.Observation(6, 5, 6), o.Observation(3, 1, 4)]
    assert np.allclose(o.posterior(8, obs, PRIORS), brute_posterior(8, obs, PRIORS), atol=2e-4)


def test_information_gain_matches_enumerated_outcomes() -> None:
    m, n = 7, 3
    obs = [o.Observation(0, 0, 3), o.Observation(6, 2, 3)]
    post = o.posterior(m, obs, PRIORS)
    h0 = o.entropy(post)
    brute = []
    for j in range(m):
        expected = 0.0
        for k in range(n + 1):
            # P(k | data) and the posterior after it, from the closed form on data + the outcome
            evidence = np.exp(o.log_posterior(m, [*obs, o.Observation(j, k, n)], PRIORS))
            before = np.exp(o.log_posterior(m, obs, PRIORS))
            p_k = math.comb(n, k) * evidence.sum() / before.sum()
            expected += p_k * o.entropy(evidence / evidence.sum())
        brute.append(h0 - expected)
    assert np.allclose(o.information_gain(m, obs, PRIORS, n), brute, atol=1e-9)
    assert np.allclose(o.predictive_outcomes(m, obs, PRIORS, 3, n).sum(), 1.0)


def test_the_most_informative_point_sits_between_what_is_known() -> None:
    m = 101
    obs = [o.Observation(0, 0, 6), o.Observation(100, 5, 6)]
    gain = o.information_gain(m, obs, PRIORS, 6)
    assert 35 <= int(np.argmax(gain)) <= 65  # bisection's choice, near the middle
    picks = o.choose_points(m, obs, PRIORS, 6, 3)
    assert len(set(picks)) == 3 and all(0 < p < 100 for p in picks)


def test_credible_interval_is_the_shortest_run_holding_the_mass() -> None:
    post = np.array([0.0, 0.01, 0.02, 0.9, 0.05, 0.02, 0.0])
    ci = o.credible_interval(post, 0.96)
    assert (ci.lo, ci.hi) == (2, 4) and ci.mass == pytest.approx(0.97)  # (3, 5) holds as much: the first
    assert (o.credible_interval(post, 0.9).lo, o.credible_interval(post, 0.9).hi) == (3, 3)
    assert o.credible_interval(np.array([0.5, 0.5]), 0.95) == o.Interval(0, 1, 1.0)


def test_clean_onset_concentrates_the_posterior_between_the_last_below_and_first_above() -> None:
    obs = [o.Observation(i, 0, 6) for i in (0, 10, 20, 29)] + [o.Observation(i, 5, 6) for i in (30, 40, 63)]
    post = o.posterior(64, obs, PRIORS)
    assert post[30] > 0.99  # tau = 30: 29 below, 30 above


def test_one_rate_throughout_is_no_change_in_range() -> None:
    quiet = [o.Observation(i, 0, 30) for i in (0, 8, 15, 23, 31)]
    post = o.posterior(32, quiet, PRIORS)
    assert post[0] + post[32] > 0.95 and post[32] > post[0]  # both ends say "one rate"; the low one is likelier
    one = o.posterior(32, quiet[:1], PRIORS)
    assert one[0] + one[32] < 0.95  # one quiet point leaves the rest open
    loud = [o.Observation(i, 25, 30) for i in (0, 8, 15, 23, 31)]
    post = o.posterior(32, loud, PRIORS)
    assert post[0] + post[32] > 0.95 and post[0] > post[32]


def test_an_island_is_found_and_a_step_is_not() -> None:
    up_down = [o.Observation(i, 0, 6) for i in (0, 5, 10)] + [o.Observation(i, 6, 6) for i in (20, 25)] + \
        [o.Observation(i, 0, 6) for i in (35, 40, 45)]
    isl = o.islands(50, up_down)
    assert isl is not None and isl.island and isl.bayes_factor > 20
    step = [o.Observation(i, 0, 6) for i in (0, 5, 10, 15)] + [o.Observation(i, 6, 6) for i in (30, 35, 40, 45)]
    isl = o.islands(50, step)
    assert isl is not None and (not isl.island or isl.bayes_factor < 20)


def test_first_round_spreads_over_the_grid() -> None:
    assert o.spread_points(101, 1) == [50]
    assert o.spread_points(101, 3) == [0, 50, 100]
    assert o.spread_points(2, 5) == [0, 1]


def _log_axis_priors(m_low: int = 1, m_high: int = 64) -> tuple[list[float], o.Priors]:
    grid = [float(x) for x in range(m_low, m_high + 1)]
    return grid, o.Priors(places=tuple(np.diff(np.log(grid))))


def test_a_log_axis_prior_is_uniform_in_log_x() -> None:
    grid, priors = _log_axis_priors()
    prior = o.tau_prior(len(grid), priors.places)
    assert prior.sum() == pytest.approx(1.0) and prior[0] == prior[-1] == o.PRIOR_OUTSIDE
    # the onset in (1, 8] is as likely as in (8, 64]: tau 1..7 against tau 8..63
    assert prior[1:8].sum() == pytest.approx(prior[8:64].sum())
    assert np.allclose(o.tau_prior(10, [2.0] * 9), o.tau_prior(10))  # equal widths: the flat prior


def test_after_both_ends_a_log_axis_picks_near_its_log_midpoint() -> None:
    """Seen on an H100 (repeats 1-64, log): 1 gave 0/58 divergent, 64 gave 74/128; a linear prior picked 33."""
    grid, priors = _log_axis_priors()
    obs = [o.Observation(0, 0, 58), o.Observation(63, 74, 128)]
    picks = [grid[i] for i in o.choose_points(64, obs, priors, 93, 3)]
    assert 5 <= picks[0] <= 12
    assert min(picks) < 8 < max(picks)  # the round covers both halves the first pick leaves (bisection's batch)
    flat = [grid[i] for i in o.choose_points(64, obs, o.Priors(), 93, 3)]
    assert 28 <= flat[0] <= 37 and min(flat) < 33 < max(flat)  # the linear axis as before: the middle first


def test_first_round_on_a_log_axis_spreads_in_log() -> None:
    grid, _ = _log_axis_priors()
    assert [grid[i] for i in o.spread_points(64, 3, list(np.log(grid)))] == [1, 8, 64]
    assert [grid[i] for i in o.spread_points(64, 1, list(np.log(grid)))] == [8]


def test_islands_weigh_change_places_by_width() -> None:
    obs = [o.Observation(i, 0, 6) for i in (0, 5)] + [o.Observation(i, 6, 6) for i in (20, 25)] + \
        [o.Observation(i, 0, 6) for i in (35, 45)]
    flat, equal = o.islands(50, obs), o.islands(50, obs, [3.0] * 49)
    assert flat is not None and equal is not None and equal.bayes_factor == pytest.approx(flat.bayes_factor)
    _, priors = _log_axis_priors(1, 50)
    logged = o.islands(50, obs, priors.places)
    assert logged is not None and logged.bayes_factor == pytest.approx(brute_bayes_factor(50, obs, priors.places),
                                                                       rel=1e-9)
    assert flat.bayes_factor == pytest.approx(brute_bayes_factor(50, obs, None), rel=1e-9)
    assert logged.bayes_factor != pytest.approx(flat.bayes_factor, rel=0.05)  # the weights matter here


def brute_bayes_factor(m: int, obs: list[o.Observation], places: tuple[float, ...] | None) -> float:
    """Two change points against one by enumerating every place: tau in 0..m weighs w(tau) (the ends 1, the
    places between grid points their widths scaled to mean 1), a pair tau1 <= tau2 weighs w(tau1) w(tau2);
    each segment's rate Beta(1, 1) integrated out."""
    w = [1.0, *o.place_weights(m, places).tolist(), 1.0]

    def segment(lo: int, hi: int) -> float:  # observations at grid indices lo..hi-1
        k = sum(x.k for x in obs if lo <= x.index < hi)
        n = sum(x.n for x in obs if lo <= x.index < hi)
        return math.exp(math.lgamma(1 + k) + math.lgamma(1 + n - k) - math.lgamma(2 + n))

    one = sum(w[t] * segment(0, t) * segment(t, m) for t in range(m + 1)) / sum(w)
    pairs = [(t1, t2) for t1 in range(m + 1) for t2 in range(t1, m + 1)]
    two = sum(w[t1] * w[t2] * segment(0, t1) * segment(t1, t2) * segment(t2, m) for t1, t2 in pairs)
    return two / sum(w[t1] * w[t2] for t1, t2 in pairs) / one


def test_outcome_bins_keep_the_probability_and_the_mean() -> None:
    p = np.array([0.5, 0.0, 0.1, 0.1, 0.1, 0.2])
    bins = o.outcome_bins(p)
    assert sum(w for _, w in bins) == pytest.approx(1.0) and len(bins) <= o.OUTCOME_BINS
    assert sum(k * w for k, w in bins) == pytest.approx(float((np.arange(6) * p).sum()), abs=0.5)


def test_a_rate_that_falls_but_not_to_the_base_rate_is_no_island() -> None:
    """Counted against the modal answer, a rate rises, then falls once most of a batch takes the other answer
    (0.00 -> 0.33 -> 0.16): it never returns to the base rate, so it is one onset, not several change points."""
    rises_then_falls = [o.Observation(i, 0, 90) for i in (0, 5, 10)] + \
        [o.Observation(i, 30, 90) for i in (20, 25)] + [o.Observation(i, 15, 90) for i in (35, 40, 45)]
    isl = o.islands(50, rises_then_falls)
    assert isl is not None and isl.bayes_factor > 20 and isl.rates[1] > isl.rates[2] > isl.rates[0]  # type: ignore[operator]
    assert not isl.island
    back = [*rises_then_falls[:5], *(o.Observation(i, 0, 90) for i in (35, 40, 45))]
    isl = o.islands(50, back)
    assert isl is not None and isl.island  # back at the base rate: an island
