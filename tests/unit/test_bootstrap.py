"""bench/block_bootstrap.py: the block bootstrap that bench/cost_calibration.py --unmatched measures against Welch
where A's and B's windows do not pair, on synthetic series whose ratio is known, and on a record's requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.analysis.cost import counted_cost, load_groups
from orchestrator.record.recorded import read
from tests import benches
from tests.load_record import ArmPlan, write_load_record

bootstrap = benches.load("block_bootstrap")


def _latencies(rng: np.random.Generator, n: int, scale: float, phi: float = 0.5) -> Any:
    """n log-normal latencies whose logs are AR(1) (each request shares half its neighbour's deviation, as
    requests in flight together share a batch), mean `scale` times exp(sigma^2 / 2)."""
    noise = rng.normal(0, 0.3, n)
    logs = np.empty(n)
    logs[0] = noise[0] / np.sqrt(1 - phi ** 2)
    for i in range(1, n):
        logs[i] = phi * logs[i - 1] + noise[i]
    return bootstrap.Series(scale * np.exp(logs), np.ones(n))


def test_block_intervals_cover_a_known_ratio_on_correlated_requests() -> None:
    """B's latencies are twice A's process: 200 pairs of series of 400 requests; the intervals hold 2 in at least
    88 % (resampling requests one by one, blocks of 1, holds it in about 75 %: too narrow for the correlation)."""
    rng = np.random.default_rng(7)
    held = 0
    for _ in range(200):
        found = bootstrap.ratio(_latencies(rng, 400, 1.0), _latencies(rng, 400, 2.0))
        assert found.lower is not None and found.upper is not None and found.method == bootstrap.METHOD
        held += found.lower <= 2.0 <= found.upper
    assert held >= 176, held


def test_the_ratio_of_the_sums_weighs_each_gap_alike() -> None:
    """Inter-token latency: a request's gaps' sum over how many, so a request of 9 gaps weighs 9 times one of 1."""
    a = bootstrap.Series(np.array([0.09, 0.01] * 15), np.array([9.0, 1.0] * 15))
    b = bootstrap.Series(np.array([0.18, 0.02] * 15), np.array([9.0, 1.0] * 15))
    assert a.statistic() == pytest.approx(0.01) and bootstrap.ratio(a, b).value == pytest.approx(2.0)


def test_one_record_gives_one_interval() -> None:
    """The generator's seed is the data's digest: the same series twice give the same interval, another does not."""
    rng = np.random.default_rng(1)
    a, b = _latencies(rng, 300, 1.0), _latencies(rng, 300, 1.5)
    first, again = bootstrap.ratio(a, b), bootstrap.ratio(a, b)
    assert (first.lower, first.upper) == (again.lower, again.upper)
    moved = bootstrap.ratio(a, bootstrap.Series(b.values * 1.01, b.weights))
    assert moved.lower != first.lower


def test_a_series_too_short_for_blocks_gives_the_ratio_and_says_why() -> None:
    a = bootstrap.Series(np.full(12, 0.1), np.ones(12))
    b = bootstrap.Series(np.full(30, 0.2), np.ones(30))
    found = bootstrap.ratio(a, b)
    assert found.value == pytest.approx(2.0) and found.lower is None and found.upper is None
    assert "12 requests on a side, too few for a block bootstrap" in found.note


def test_block_length_is_the_cube_root_rounded_up() -> None:
    assert [bootstrap.block_length(n) for n in (1, 8, 27, 28, 1000, 10_000)] == [1, 2, 3, 4, 10, 22]


def test_a_records_requests_in_send_order_give_the_ratio(tmp_path: Path) -> None:
    """On the synthetic record (3 windows of 8 requests, B twice as slow): every metric's series holds the 24
    counted requests, inter-token latency weighs each by its 9 gaps, and each ratio is 2 within its interval."""
    plans = {"a": ArmPlan([0.10, 0.11, 0.09]), "b": ArmPlan([0.20, 0.22, 0.18])}
    groups = load_groups(read(write_load_record(tmp_path / "run", plans)))
    series = {arm: bootstrap.request_series(rows, counted_cost(arm, phase, rows)[1])
              for (arm, phase), rows in groups.items()}
    assert list(series["a"]["inter_token_latency_s"].weights) == [9.0] * 24
    for metric in ("latency_s", "time_to_first_token_s", "inter_token_latency_s"):
        assert len(series["a"][metric]) == len(series["b"][metric]) == 24
        found = bootstrap.ratio(series["a"][metric], series["b"][metric])
        assert found.value == pytest.approx(2.0, rel=1e-3) and found.lower <= found.value <= found.upper < 2.5
