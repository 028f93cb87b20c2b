"""analysis/cost.py, starts.py and coresidents.py on a synthetic record whose costs are known by hand
(tests/load_record.py: 8 requests a window, one every 125 ms, a fixed latency per window)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest

from orchestrator.analysis.compare import compare
from orchestrator.analysis.coresidents import METRICS, TRACE, UNSEEN, overlapping
from orchestrator.analysis.cost import NOT_STREAMED, cost
from orchestrator.analysis.cost_results import CostReport
from orchestrator.analysis.pairing import PAIRED, t_quantile, welch
from orchestrator.record.recorded import read
from orchestrator.report.table import size
from tests.load_record import ArmPlan, write_load_record


def _cost(tmp_path: Path, plans: Mapping[str, ArmPlan]) -> CostReport:
    paths = write_load_record(tmp_path / "run", plans)
    recorded = read(paths)
    return cost(recorded, compare(recorded, next(iter(plans))))


def test_throughput_latency_and_streaming_times_of_one_load_point(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"a": ArmPlan([0.10, 0.11, 0.09])})
    (phase,) = report.phases
    assert (phase.arm, phase.phase, phase.load_point, phase.offered_rate_per_s) == ("a", "load_8", "poisson 8/s", 8.0)
    assert phase.windows == 3 and phase.requests == 24 and phase.errors == 0  # the warm-up row is not counted
    spans = [0.875 + latency for latency in (0.10, 0.11, 0.09)]  # first send to last answer of each window
    assert phase.per_window["request_throughput_per_s"] == pytest.approx([8 / s for s in spans])
    assert phase.request_throughput_per_s.avg == pytest.approx(24 / sum(spans))  # pooled over the windows
    assert phase.request_throughput_per_s.count == 3 and phase.request_throughput_per_s.unit == "requests/s"
    assert phase.output_tokens_per_s.avg == pytest.approx(240 / sum(spans))
    assert phase.latency_s.p50 == pytest.approx(0.10) and phase.latency_s.count == 24
    assert phase.latency_s.avg == pytest.approx(0.10) and phase.latency_s.max == pytest.approx(0.11)
    assert phase.time_to_first_token_s.p50 == pytest.approx(0.02) and phase.time_to_first_token_s.count == 24
    assert phase.inter_token_latency_s.avg == pytest.approx(0.01) and phase.inter_token_latency_s.count == 24 * 9
    assert phase.send_lateness_s.p99 == pytest.approx(0.001)


def test_an_unstreamed_arm_has_no_time_to_first_token_never_zero(tmp_path: Path) -> None:
    (phase,) = _cost(tmp_path, {"a": ArmPlan([0.1, 0.1], streamed=False)}).phases
    for metric in (phase.time_to_first_token_s, phase.inter_token_latency_s):
        assert metric.avg is None and metric.p50 is None and metric.count == 0 and metric.note == NOT_STREAMED
    assert phase.latency_s.avg == pytest.approx(0.1)


def test_errors_are_counted_and_left_out_of_the_latencies(tmp_path: Path) -> None:
    (phase,) = _cost(tmp_path, {"a": ArmPlan([0.1, 0.1], errors=2)}).phases
    assert phase.errors == 2 and phase.error_share == pytest.approx(2 / 16)
    assert phase.latency_s.count == 14
    assert phase.per_window["request_throughput_per_s"][0] == pytest.approx(6 / 0.975)


def test_b_over_a_with_an_interval_from_the_windows(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"a": ArmPlan([0.10, 0.11, 0.09]), "b": ArmPlan([0.20, 0.22, 0.18])})
    latency = next(r for r in report.ratios if r.metric == "latency_s")
    assert (latency.arm_a, latency.arm_b, latency.phase) == ("a", "b", "load_8")
    assert latency.ratio == pytest.approx(2.0)
    assert latency.lower_95 is not None and latency.upper_95 is not None
    assert 1.5 < latency.lower_95 < 2.0 < latency.upper_95 < 2.7 and latency.replicates_a == 3
    throughput = next(r for r in report.ratios if r.metric == "request_throughput_per_s")
    assert throughput.ratio is not None and throughput.ratio < 1


def test_one_window_gives_a_ratio_and_says_there_is_no_interval(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"a": ArmPlan([0.1]), "b": ArmPlan([0.3])})
    latency = next(r for r in report.ratios if r.metric == "latency_s")
    assert latency.ratio == pytest.approx(3.0) and latency.lower_95 is None and latency.upper_95 is None
    assert latency.note.startswith("no interval: one window on a side")


def test_welch_interval_matches_a_hand_computation() -> None:
    a, b = [1.0, 1.2, 0.9, 1.1], [1.5, 1.4, 1.9]
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / 4, lb.var(ddof=1) / 3
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2)
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    value, low, high, note = astuple(welch(a, b))[:4]
    assert value is not None
    assert value == pytest.approx(math.exp(lb.mean() - la.mean()))
    assert (low, high) == pytest.approx((value * math.exp(-half), value * math.exp(half))) and note == ""
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-6)  # Student's table
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)
    assert welch([1.0, 0.0], [1.0, 1.0]).value is None


def test_the_aa_pair_is_the_cost_noise_floor(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"base": ArmPlan([0.1, 0.1]), "base_aa": ArmPlan([0.1, 0.1])})
    floor = next(r for r in report.ratios if r.metric == "latency_s")
    assert (floor.arm_a, floor.arm_b) == ("base", "base_aa") and floor.ratio == pytest.approx(1.0)
    assert floor.note == "every pair gave the same ratio" and floor.method == PAIRED  # one schedule: windows pair


def test_starts_failure_rate_time_to_ready_and_memory(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"a": ArmPlan([0.1], ready_s=[4.1, 3.9, 4.4]),
                              "b": ArmPlan([0.1], ready_s=[4.0, 4.2], failed_starts=1, peak_memory_bytes=None)})
    a, b = report.starts
    assert (a.starts, a.ready, a.failure_lower_95) == (3, 3, 0.0)
    assert a.failure_upper_95 == pytest.approx(1 - 0.05 ** (1 / 3))  # 63 %
    assert (a.time_to_ready_s.p50, a.time_to_ready_s.min, a.time_to_ready_s.max) == pytest.approx((4.1, 3.9, 4.4))
    assert a.peak_memory_bytes.max == 2 * 2**30 and (a.model, a.model_revision) == ("tiny", "abc123")
    assert (b.starts, b.ready) == (3, 2) and b.failure_lower_95 > 0
    assert b.peak_memory_bytes.avg is None and "no cgroup" in b.peak_memory_bytes.note
    ready = next(r for r in report.ratios if r.metric == "time_to_ready_s")
    assert ready.phase == "" and ready.replicates_a == 3 and ready.replicates_b == 2


def test_rates_compared_per_cell(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"a": ArmPlan([0.1] * 5, divergent_probes=5), "b": ArmPlan([0.1] * 5)})
    (rate,) = report.rates
    assert (rate.arm_a, rate.arm_b, rate.prompt_id, rate.phase) == ("a", "b", "capital", "load_8")
    assert (rate.k_a, rate.n_a, rate.k_b, rate.n_b) == (5, 10, 0, 10)
    assert rate.difference == pytest.approx(-0.5) and rate.verdict == "lower"


def test_co_residents_from_the_trace_then_metrics_then_not_observable(tmp_path: Path) -> None:
    report = _cost(tmp_path, {"traced": ArmPlan([0.1] * 3, traced=True), "sampled": ArmPlan([0.1], running_max=5),
                              "blind": ArmPlan([0.1])})
    found = {c.arm: c for c in report.co_residents}
    # steps 0..23, each request runs 3 steps: the first probe (step 0) overlaps 2 others, later ones 4
    assert (found["traced"].least, found["traced"].most, found["traced"].source) == (2, 4, TRACE)
    assert found["traced"].probes == 6
    assert (found["sampled"].least, found["sampled"].most, found["sampled"].source) == (4, 4, METRICS)
    assert found["blind"].least is None and found["blind"].source == UNSEEN


def test_a_probe_no_metrics_reading_showed_has_no_co_resident_count() -> None:
    """A reading of 0 while a probe was in flight missed it (it ran): no count of 0 co-residents. With readings
    in the phase but none showing its probes, the cell's co-residents were not observed (the arm has /metrics)."""
    from orchestrator.analysis.coresidents import MISSED, per_cell
    from orchestrator.report.cost_md import _co_residents

    nan = float("nan")
    steps = np.full(4, nan)
    roles, prompts = ["measured", "measured", "background", "background"], ["p", "p", "bg", "bg"]
    [seen] = per_cell("a", "load", prompts, roles, steps, steps, np.array([0.0, 4.0, 3.0, nan]))
    assert (seen.least, seen.most, seen.source, seen.observed, seen.probes) == (3, 3, METRICS, 1, 2)
    assert _co_residents([seen]) == ", each alongside 3 other requests (/metrics; 1 of 2 probes observed)"
    [missed] = per_cell("a", "load", prompts, roles, steps, steps, np.array([0.0, nan, 3.0, nan]))
    assert (missed.least, missed.most, missed.source, missed.observed) == (None, None, MISSED, 0)
    assert _co_residents([missed]).startswith(", co-residents not observed (no /metrics sample")
    [blind] = per_cell("a", "load", prompts, roles, steps, steps, np.full(4, nan))
    assert blind.source == UNSEEN


def test_overlap_counts_by_binary_search_agree_with_the_pairs() -> None:
    rng = np.random.default_rng(0)
    first = rng.integers(0, 50, 200).astype(float)
    last = first + rng.integers(0, 10, 200)
    probes = np.arange(0, 200, 7)
    brute = [int(((first <= last[p]) & (last >= first[p])).sum()) - 1 for p in probes]
    assert overlapping(first, last, probes).tolist() == brute



@pytest.mark.parametrize(("size_bytes", "said"), [(0, "0 B"), (700, "700 B"), (2**19, "512 KiB"),
                                                  (int(3.2 * 2**20), "3.2 MiB"), (80 * 2**20, "80 MiB"),
                                                  (3 * 2**29, "1.5 GiB")])
def test_a_size_is_never_said_as_zero_when_it_is_not(size_bytes: int, said: str) -> None:
    """`check`'s 'record about N' of a small study (load_point: under 1 MiB) said 0 MiB."""
    assert size(size_bytes) == said
