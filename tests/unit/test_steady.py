"""Steady state and intervals that cover (analysis/steady.py, pairing.py): MSER-5 on planted series, the paired
interval's coverage on synthetic windows, and both through a synthetic record (tests/load_record.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from orchestrator.analysis.compare import compare
from orchestrator.analysis.cost import cost
from orchestrator.analysis.cost_results import CostReport
from orchestrator.analysis.pairing import PAIRED, WELCH, paired, welch, window_ratio
from orchestrator.analysis.steady import mser5, trend
from orchestrator.record.recorded import read
from orchestrator.report.cost_md import costs_lines, sections
from tests.load_record import ArmPlan, write_load_record


def test_mser5_cuts_a_planted_warm_up_and_keeps_a_steady_series_whole() -> None:
    rng = np.random.default_rng(7)
    cuts, warm, steady, whole = [], 0, 0, 0
    for _ in range(300):
        series = rng.lognormal(0, 0.3, 120)
        found = mser5(series)
        steady += found.at is not None and found.at <= 30
        whole += found.at == 0
        series[:30] *= 4  # slow for its first 30 requests
        cut = mser5(series).at
        warm += cut is not None and 30 <= cut <= 40
        cuts.append(cut)
    # A steady series mostly counts whole, and loses at most a quarter of itself nearly always (MSER-5 trims
    # what noise makes look like a start)
    assert whole >= 150 and steady >= 255, (whole, steady)
    assert all(cut is None or cut >= 30 for cut in cuts), cuts  # the warm-up never counts
    assert warm >= 240, cuts  # and it is mostly cut where it ends, within two slices


def test_a_stationary_heavy_tailed_series_is_not_cut_but_a_mild_warm_up_is() -> None:
    """A load point's worth (72 requests) of log-normal latencies of spread 0.5, as bench/planted_recording.py's
    server draws them: MSER-5 alone cut a slow start off half of them (a biased steady part); a cut must stand out
    of the noise. A warm-up twice as slow for 20 requests still does."""
    rng = np.random.default_rng(11)
    whole, mild = 0, 0
    for _ in range(300):
        series = rng.lognormal(0, 0.5, 72)
        whole += mser5(series).at == 0
        series[:20] *= 2
        cut = mser5(series).at
        mild += cut is not None and cut >= 15
    assert whole >= 270, whole
    assert mild >= 240, mild


def test_mser5_finds_no_steady_part_in_a_series_that_still_moves() -> None:
    rng = np.random.default_rng(3)
    rising = [mser5(rng.lognormal(0, 0.3, 80) * np.geomspace(1, 10, 80)).at for _ in range(100)]
    assert rising.count(None) >= 95, rising
    assert mser5(np.ones(12)).at == 0  # too short to tell: all of it counts


def test_paired_intervals_cover_one_on_windows_that_share_their_schedule() -> None:
    """Each window's schedule makes it slower or faster on both sides alike (a spread 5 times the noise): the
    paired interval must hold 1 about 95 % of the time, and be far narrower than Welch's over the same windows."""
    rng = np.random.default_rng(11)
    covered, narrower, trials = 0, 0, 2000
    for _ in range(trials):
        schedule = rng.normal(0, 0.25, 6)
        a, b = np.exp(schedule + rng.normal(0, 0.05, 6)), np.exp(schedule + rng.normal(0, 0.05, 6))
        found = paired(list(a), list(b))
        assert found.lower is not None and found.upper is not None and found.method == PAIRED
        covered += found.lower <= 1 <= found.upper
        other = welch(list(a), list(b))
        assert other.lower is not None and other.upper is not None
        narrower += math.log(found.upper / found.lower) < 0.5 * math.log(other.upper / other.lower)
    assert 0.93 * trials <= covered <= 0.97 * trials, covered
    assert narrower >= 0.9 * trials, narrower
    planted = paired([1.0, 2.0, 4.0], [2.1, 3.9, 8.2])
    assert planted.value == pytest.approx(2.0, rel=0.05) and planted.lower is not None and planted.lower > 1


def test_windows_pair_only_where_their_schedules_match() -> None:
    same = window_ratio([0, 1, 2], [1.0, 2.0, 3.0], ["x", "y", "z"], [0, 1, 2], [1.1, 2.2, 3.3], ["x", "y", "z"])
    assert same.method == PAIRED and same.value == pytest.approx(1.1)
    other = window_ratio([0, 1, 2], [1.0, 2.0, 3.0], ["x", "y", "z"], [0, 1, 2], [1.1, 2.2, 3.3], ["x", "q", "z"])
    assert other.method == WELCH and other.value == pytest.approx(1.1)


def _cost(tmp_path: Path, plans: dict[str, ArmPlan]) -> CostReport:
    recorded = read(write_load_record(tmp_path / "run", plans))
    return cost(recorded, compare(recorded, next(iter(plans))))


def test_a_slow_first_window_is_kept_out_and_the_ratio_is_the_steady_parts(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"a": ArmPlan([0.1] * 6), "b": ArmPlan([0.5] + [0.1] * 5)})
    a, b = report.phases
    assert a.steady.steady and a.steady.windows_kept_out == [] and a.steady.requests_kept_out == 0
    assert b.steady.steady and b.steady.windows_kept_out == [0] and b.steady.windows == [1, 2, 3, 4, 5]
    # cut at the first slice of 5 past the slow window: window 1's first 2 requests go with it
    assert (b.steady.from_request, b.steady.requests_kept_out, b.requests) == (10, 10, 38)
    assert b.latency_s.max == pytest.approx(0.1)
    latency = next(r for r in report.ratios if r.metric == "latency_s")
    assert latency.ratio == pytest.approx(1.0) and latency.method == PAIRED and latency.replicates_b == 5
    table = "\n".join(sections(report, []))
    assert "| b | poisson 8/s | yes | 5 | 38 | 10 (window 0 whole) |" in table, table


def test_a_load_point_that_never_settles_says_so_with_its_trend(tmp_path: Path) -> None:
    falling = [0.8 / 2 ** i for i in range(10)]
    report = _cost(tmp_path, {"a": ArmPlan([0.1] * 10), "b": ArmPlan(falling)})
    b = report.phases[1]
    assert not b.steady.steady and b.steady.note.startswith("MSER-5 found no steady part")
    ratios = [r for r in report.ratios if r.arm_b == "b" and r.phase]
    assert ratios and all(r.lower_95 is None and r.note == "no interval: b not steady" for r in ratios)
    (line,) = costs_lines("b", [b], report.ratios)
    rates = [8 / (0.875 + s) for s in falling]
    assert f"at poisson 8/s: {trend(rates)}: not steady; warm up longer (load.warmup)" in line, line
    assert trend([4.9, 7.6, 25.8]) == "throughput 4.9 -> 7.6 -> 25.8 requests/s"
