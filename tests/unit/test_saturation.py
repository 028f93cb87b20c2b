"""A series to saturation (load.series, docs/load.md "To saturation"): the spacing of its points by Little's law,
the over-saturation stop on planted queues, the run-time rule (rates, stop, a resumed run deciding alike), the
config's checks and the report's lines."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from orchestrator.analysis.cost_results import CostReport, Metric, PhaseCost
from orchestrator.analysis.saturation import Window, series_summary, verdict, window_interval
from orchestrator.config import series
from orchestrator.config.schema import Arrivals, LoadConfig, LoadSeriesConfig, PhaseConfig, PhaseKind, ProtocolConfig
from orchestrator.config.validate import _load_point
from orchestrator.report import saturation_md
from orchestrator.run.send import protocol
from orchestrator.run.send.series import SeriesRule
from tests import benches

BENCH = benches.load("saturation_stop")  # its planted queue: one slot, a fixed service time, Poisson arrivals
queue, SERVICE_S = BENCH.queue, BENCH.SERVICE_S  # 100 ms a request: capacity 10 requests/s


def _load(points: int = 5, in_flight: int = 8, requests: int = 40) -> LoadConfig:
    return LoadConfig(arrivals=Arrivals.poisson, requests=requests, windows=2, background_max_tokens=[4],
                      series=LoadSeriesConfig(points=points, in_flight=in_flight, tolerance=0.1))


def test_points_are_spaced_by_littles_law_from_the_single_request_latency() -> None:
    load = _load(points=5, in_flight=8)
    assert [round(series.multiplier(k, load.series), 3) for k in range(5)] == [1.0, 1.682, 2.828, 4.757, 8.0]
    first = series.point_load(load, 0)
    assert (first.rate_per_s, first.concurrency) == (None, 1)  # one request at a time
    # L = 0.1 s: point K offers m_K / L, to three significant digits; the last one 8 in flight at L
    assert [series.point_load(load, k, 0.1).rate_per_s for k in range(1, 5)] == [16.8, 28.3, 47.6, 80.0]
    phases = series.expand({"sat": PhaseConfig(PhaseKind.load, load=load), "seq": PhaseConfig()})
    assert list(phases) == ["sat@0", "sat@1", "sat@2", "sat@3", "sat@4", "seq"]
    assert series.parse("sat@3") == ("sat", 3) and series.parse("seq") is None and series.base_name("sat@2") == "sat"


@pytest.mark.parametrize("seed", range(5))
def test_the_stop_comes_at_the_first_rate_above_capacity_not_before(seed: int) -> None:
    """Planted queues at 0.5, 0.8, 1.68 and 2.5 times the capacity (the spacing of a series of in_flight 8 over 5
    points): kept up, kept up, over-saturated. (bench/saturation_stop.py gives the rule's rates over many
    draws: a point near the capacity may be missed, which only widens the bound.)"""
    verdicts = [verdict([queue(f / SERVICE_S, 40, 100 * seed + w) for w in range(2)], 0.1, f / SERVICE_S)
                for f in (0.5, 0.8, 1.68, 2.5)]
    assert [v.over_saturated for v in verdicts] == [False, False, True, True], [v.why for v in verdicts]
    assert verdicts[2].answer_share is not None and verdicts[2].answer_share < 0.9
    assert verdicts[2].wait_slope is not None and verdicts[2].wait_slope > 0


def test_falling_behind_without_a_growing_wait_is_not_over_saturation() -> None:
    """Answers slower than arrivals over the window, but each request waits no longer than the first (a server
    that paused once, then caught up): one signal alone does not stop the series; nor does a wait that grows
    while the answers keep up."""
    kept = queue(5.0, 40, 1)
    late = Window(kept.scheduled_s, np.full(40, 0.03), kept.answered_s * 1.5)
    assert not verdict([late, late], 0.1, 5.0).over_saturated
    growing = Window(kept.scheduled_s, kept.scheduled_s * 0.01 + 0.03, kept.answered_s)
    assert not verdict([growing, growing], 0.1, 5.0).over_saturated
    assert not verdict([queue(None, 40, 1)], 0.1, None).over_saturated  # a closed loop keeps up by construction
    # behind, and a wait shown growing, but by less than the tolerance (0.05 s a second): a swing, not a backlog
    creeping = Window(kept.scheduled_s, kept.scheduled_s * 0.05 + 0.03, kept.answered_s * 1.5)
    said = verdict([creeping, creeping], 0.1, 5.0)
    assert not said.over_saturated and said.wait_slope == pytest.approx(0.05), said


def test_a_backlog_in_one_window_only_is_not_over_saturation() -> None:
    """Pooled, the windows read over-saturated; one of them kept up: the point is not called over-saturated."""
    swamped, calm = queue(25.0, 40, 3), queue(8.0, 40, 6)  # 2.5 and 0.8 times the capacity
    assert verdict([swamped, swamped], 0.1, 25.0).over_saturated
    said = verdict([swamped, calm], 0.1, 25.0)
    assert not said.over_saturated and said.why.endswith("yet in 1 of 2 windows only"), said


def _rows(phase: str, window: Window, rate: float | None, batch: int) -> list[dict[str, object]]:
    return [{"phase": phase, "role": protocol.MEASURED if i % 4 == 0 else protocol.BACKGROUND,
             "request_id": f"a/{phase}/{batch}/{i}", "start": 0, "batch_id": batch, "error": None,
             "offered_rate_per_s": rate, "scheduled_ns": int(s * 1e9), "send_ns": int(s * 1e9),
             "first_token_ns": int((s + w) * 1e9), "recv_ns": int(a * 1e9)}
            for i, (s, w, a) in enumerate(zip(window.scheduled_s, window.waited_s, window.answered_s, strict=True))]


def _groups(load: LoadConfig) -> list[list[protocol.Request]]:
    proto = ProtocolConfig(name="p", phases={"sat": PhaseConfig(PhaseKind.load, load=load)})
    return list(protocol.plan(proto, None, {"0": "hello"}))[1:]  # the cold request first


def test_the_rule_sets_each_rate_from_point_0_and_stops_after_the_first_over_saturated_point() -> None:
    load = _load(points=5, in_flight=8, requests=40)
    proto = ProtocolConfig(name="p", phases={"sat": PhaseConfig(PhaseKind.load, load=load)})
    rule = SeriesRule(proto)
    groups = _groups(load)
    assert [g[0].phase for g in groups] == [f"sat@{k}" for k in range(5) for _ in range(2)]
    assert rule.resolve(groups[0]) is groups[0]  # point 0 as planned: a closed loop of one
    for w in range(2):
        rule.observe(_rows("sat@0", queue(None, 40, w), None, w))
    assert rule.latency_s("sat") == pytest.approx(SERVICE_S)
    point_1 = rule.resolve(groups[2])
    assert point_1 is not None and point_1[0].window is not None
    assert point_1[0].window.load.rate_per_s == 16.8 and point_1[0].window.label == "poisson 16.8/s"
    # the same requests as planned (prompts, probes, order), sent at the rate's times
    assert [(r.prompt_id, r.role, r.request_index) for r in point_1] == \
        [(r.prompt_id, r.role, r.request_index) for r in groups[2]]
    assert point_1[-1].offset_s == pytest.approx(groups[2][-1].offset_s * 1.68 / 16.8)  # placeholder 1.68/L
    rule.observe(_rows("sat@1", queue(16.8, 40, 7), 16.8, 0))
    assert rule.ended("sat@2") is None  # point 1 has one of its two windows: not decided yet
    rule.observe(_rows("sat@1", queue(16.8, 40, 8), 16.8, 1))
    assert rule.ended("sat@1") is None and rule.ended("sat@2") is not None
    assert "point 1 over-saturated" in (rule.ended("sat@4") or "")
    assert rule.resolve(groups[4]) is None and rule.resolve(groups[8]) is None

    # `run --resume`: a new rule that observed the recorded rows decides alike
    again = SeriesRule(proto)
    again.observe([*_rows("sat@0", queue(None, 40, 1), None, 1), *_rows("sat@0", queue(None, 40, 0), None, 0)])
    resumed = again.resolve(groups[3])
    assert resumed is not None and resumed[0].window is not None and resumed[0].window.load.rate_per_s == 16.8


def test_a_series_that_keeps_up_goes_on_to_its_last_point() -> None:
    load = _load(points=3, in_flight=2, requests=40)
    proto = ProtocolConfig(name="p", phases={"sat": PhaseConfig(PhaseKind.load, load=load)})
    rule = SeriesRule(proto)
    for w in range(2):
        rule.observe(_rows("sat@0", queue(None, 40, w, service_s=0.1), None, w))
        rule.observe(_rows("sat@1", queue(5.0, 40, w, service_s=0.05), 14.1, w))  # a server twice as fast
    assert rule.ended("sat@2") is None and rule.resolve(_groups(load)[4]) is not None


@pytest.mark.parametrize(("change", "field"), [
    ({"rate_per_s": 8.0}, "rate_per_s"), ({"concurrency": 4}, "concurrency"),
    ({"requests": None, "duration_s": 5.0}, "requests"), ({"series": LoadSeriesConfig(points=1)}, "series.points"),
    ({"series": LoadSeriesConfig(points=4, in_flight=1)}, "series.in_flight"),
    ({"series": LoadSeriesConfig(points=4, tolerance=1.5)}, "series.tolerance")])
def test_a_bad_series_is_one_line_naming_the_field_and_the_fix(change: dict[str, object], field: str) -> None:
    found = _load_point("protocol.phases.sat.load", dataclasses.replace(_load(), **change))  # type: ignore[arg-type]
    assert len(found) == 1 and found[0].startswith(f"protocol.phases.sat.load.{field}="), found
    assert _load_point("protocol.phases.sat.load", _load()) == []  # no rate, no ceiling: a series sets them


def _cost(phase: str, offered: float | None, per_window: list[float]) -> PhaseCost:
    m = Metric("requests/s", avg=float(np.mean(per_window)))
    return PhaseCost("a", phase, "closed loop of 1" if offered is None else f"poisson {offered:g}/s", offered, 2, 40,
                     0, 0.0, m, m, Metric("s"), Metric("s"), Metric("s"), Metric("s"),
                     {"request_throughput_per_s": per_window, "latency_s": [0.1, 0.11],
                      "time_to_first_token_s": [0.03, 0.03]})


def test_the_report_names_the_saturation_point_with_its_bound() -> None:
    points = [_cost("sat@0", None, [9.0, 9.2]), _cost("sat@1", 16.8, [9.5, 9.7])]
    judged = [(points[0], verdict([queue(None, 40, 0)], 0.1, None)),
              (points[1], verdict([queue(16.8, 40, w) for w in range(2)], 0.1, 16.8))]
    summary = series_summary("a", "sat", 0.1, judged, 5)
    assert (summary.lower_per_s, summary.upper_per_s) == (pytest.approx(9.1), 16.8)
    cost = CostReport(phases=points, saturation=[summary])
    line, = saturation_md.opening_lines(cost, "a")
    assert line.startswith("Saturates (sat): above 9.1 req/s (the most a point that kept up reached) and below "
                           "16.8 req/s offered (poisson 16.8/s: answers at "), line
    assert line.endswith("2 of 5 points sent")
    table = saturation_md.section(cost, [])
    assert "| sat@0 | one at a time | 9.1 [" in "\n".join(table)
    assert "| sat@1 | 16.8 | 9.6 [" in "\n".join(table) and "over-saturated: answers at" in "\n".join(table)
    assert saturation_md.charts(cost, [])[0].startswith("<svg")
    kept = series_summary("a", "sat", 0.1, judged[:1], 1)
    assert kept.upper_per_s is None and "not reached" in saturation_md.bound(kept)


def test_window_interval_is_the_geometric_mean_with_a_t_interval_on_the_logs() -> None:
    mean, low, high = window_interval([8.0, 10.0, 12.0])
    assert mean == pytest.approx((8 * 10 * 12) ** (1 / 3)) and low is not None and high is not None
    assert 0 < low < mean < high
    assert window_interval([9.0]) == (9.0, None, None)


def test_a_phase_named_like_a_point_is_refused_beside_a_series() -> None:
    from types import SimpleNamespace

    from orchestrator.config.validate import _load_points

    phases = {"sat": PhaseConfig(PhaseKind.load, load=_load()), "sat@1": PhaseConfig()}
    found = _load_points(SimpleNamespace(protocol=SimpleNamespace(phases=phases)))  # type: ignore[arg-type]
    assert len(found) == 1 and found[0].startswith("protocol.phases='sat@1': must be phase names without '@'"), found
    del phases["sat"]
    assert _load_points(SimpleNamespace(protocol=SimpleNamespace(phases=phases))) == []  # type: ignore[arg-type]


def test_no_ratio_between_arms_at_a_later_point_of_a_series() -> None:
    from orchestrator.analysis.cost_results import CostRatio
    from orchestrator.analysis.saturation import same_load

    made = [CostRatio("a", "b", phase, "latency_s", 1.0, 0.9, 1.1, 2, 2) for phase in ("sat@0", "sat@1", "other")]
    kept = same_load(made, {"sat": {"points": ["sat@0", "sat@1", "sat@2"], "tolerance": 0.1}})
    assert [r.phase for r in kept] == ["sat@0", "other"]  # each arm's sat@1 had its own rate


def test_a_point_without_an_answer_ends_the_summary_without_a_bound() -> None:
    dead = dataclasses.replace(_cost("sat@1", 16.8, [0.0]), request_throughput_per_s=Metric("requests/s"))
    judged = [(_cost("sat@0", None, [9.0, 9.2]), verdict([queue(None, 40, 0)], 0.1, None)),
              (dead, verdict([queue(16.8, 40, 1)], 0.1, 16.8))]
    summary = series_summary("a", "sat", 0.1, judged, 5)
    assert summary.upper_per_s is None and summary.note == "not reached: sat@1 had no answer", summary
