"""analysis/rates.py against published values: Newcombe (1998), "Interval estimation for the difference between
independent proportions", Statistics in Medicine 17:873-890, Table II, method 10 (the hybrid score interval);
Fisher's exact test against hand-counted hypergeometric tables."""

from __future__ import annotations

import math

import pytest

from orchestrator.analysis.rates import HIGHER, LOWER, NOT_SHOWN, compare_rates, fisher, newcombe, wilson

# (k1, n1, k2, n2) -> (difference, lower, upper): Newcombe's Table II, method 10, examples (a) to (h)
NEWCOMBE_TABLE_II = [
    ((56, 70, 48, 80), (0.2000, 0.0524, 0.3339)),
    ((9, 10, 3, 10), (0.6000, 0.1705, 0.8090)),
    ((6, 7, 2, 7), (0.5714, 0.0582, 0.8062)),
    ((5, 56, 0, 29), (0.0893, -0.0381, 0.1926)),
    ((0, 10, 0, 20), (0.0, -0.1611, 0.2775)),
    ((0, 10, 0, 10), (0.0, -0.2775, 0.2775)),
    ((10, 10, 0, 20), (1.0, 0.6791, 1.0)),
    ((10, 10, 0, 10), (1.0, 0.6075, 1.0)),
]


@pytest.mark.parametrize(("counts", "published"), NEWCOMBE_TABLE_II)
def test_newcombe_method_10_gives_the_published_intervals(counts: tuple[int, int, int, int],
                                                          published: tuple[float, float, float]) -> None:
    assert newcombe(*counts) == pytest.approx(published, abs=5e-5)


def test_wilson_interval_of_81_of_263_is_the_textbook_one() -> None:
    # Newcombe (1998) "Two-sided confidence intervals for the single proportion", Table I: 81/263
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=5e-5)


def test_fisher_counts_the_hypergeometric_tables() -> None:
    # 3 of 4 against 0 of 4: the table seen and none more extreme one way: C(4,0)C(4,3)/C(8,3) = 4/56
    lower, two_sided = fisher(3, 4, 0, 4)
    assert lower == pytest.approx(4 / 56)
    assert two_sided == pytest.approx(8 / 56)  # and its mirror, 0 of 4 against 3 of 4
    # the lady tasting tea: 4 of 4 cups right against 0 of 4: one-sided p = 1/70
    assert fisher(4, 4, 0, 4)[0] == pytest.approx(1 / 70)
    assert fisher(2, 4, 2, 4) == pytest.approx((53 / 70, 1.0))


def test_the_verdict_follows_the_interval() -> None:
    assert compare_rates(30, 50, 0, 50).verdict == LOWER  # B diverged in none, A in 30 of 50
    assert compare_rates(0, 50, 30, 50).verdict == HIGHER
    same = compare_rates(2, 50, 1, 50)
    assert same.verdict == NOT_SHOWN and same.lower_95 < 0 < same.upper_95
    assert same.difference == pytest.approx(-0.02) and 0 < same.p_lower < 1 and same.p_two_sided == 1.0


def test_no_divergence_on_either_side_is_not_shown_lower() -> None:
    result = compare_rates(0, 75, 0, 75)
    assert result.verdict == NOT_SHOWN and result.difference == 0
    assert result.p_lower == 1.0 and result.p_two_sided == 1.0
    assert math.isclose(-result.lower_95, result.upper_95)


def test_fisher_at_large_n_agrees_with_integer_weights() -> None:
    k_a, n_a, k_b, n_b = 30, 5000, 10, 5000
    total = k_a + k_b
    weights = {x: math.comb(n_b, x) * math.comb(n_a, total - x) for x in range(total + 1)}
    whole = sum(weights.values())
    lower = sum(w for x, w in weights.items() if x <= k_b) / whole
    two_sided = sum(w for w in weights.values() if w <= weights[k_b]) / whole
    assert fisher(k_a, n_a, k_b, n_b) == pytest.approx((lower, two_sided), rel=1e-9)
    assert compare_rates(k_a, n_a, k_b, n_b).verdict == LOWER
