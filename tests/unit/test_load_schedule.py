"""A load point's schedule (run/load/schedule.py) and its place in the protocol's plan (run/send/protocol.py)."""

from __future__ import annotations

import itertools
import statistics

import pytest

from orchestrator.config.background import Background
from orchestrator.config.schema import Arrivals, LoadConfig, LoadWarmupConfig, PhaseConfig, PhaseKind, ProtocolConfig
from orchestrator.run.load import schedule
from orchestrator.run.load.schedule import Pace, offsets_s
from orchestrator.run.send import protocol


def test_constant_arrivals_are_exactly_one_over_the_rate_apart() -> None:
    times = offsets_s(Pace(20.0, None, 50, None), Arrivals.constant, 1.0, 0)
    assert times is not None and len(times) == 50 and times[0] == 0.0
    assert all(b - a == pytest.approx(0.05, abs=1e-12) for a, b in itertools.pairwise(times))


@pytest.mark.parametrize(("arrivals", "shape"), [(Arrivals.poisson, 1.0), (Arrivals.gamma, 0.5), (Arrivals.gamma, 4.0)])
def test_random_arrivals_keep_the_mean_rate(arrivals: Arrivals, shape: float) -> None:
    times = offsets_s(Pace(100.0, None, 20000, None), arrivals, shape, 3)
    assert times is not None
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.fmean(gaps) == pytest.approx(0.01, rel=0.03)  # 20000 gaps: the mean within a few %
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)  # a gamma's coefficient of variation is 1/sqrt(k)
    assert cv == pytest.approx(1 / shape ** 0.5, rel=0.1)


def test_a_window_is_the_same_every_time_and_differs_from_the_next() -> None:
    pace = Pace(10.0, None, 30, None)
    assert offsets_s(pace, Arrivals.poisson, 1.0, 5) == offsets_s(pace, Arrivals.poisson, 1.0, 5)
    assert offsets_s(pace, Arrivals.poisson, 1.0, 5) != offsets_s(pace, Arrivals.poisson, 1.0, 6)


def test_a_duration_holds_every_arrival_before_it() -> None:
    times = offsets_s(Pace(50.0, None, None, 4.0), Arrivals.poisson, 1.0, 0)
    assert times is not None and max(times) < 4.0
    assert len(times) == pytest.approx(200, rel=0.2)
    assert offsets_s(Pace(None, 8, 10, None), Arrivals.poisson, 1.0, 0) is None  # a closed loop has no times


def test_every_kth_request_is_a_probe_round_robin_over_the_prompts() -> None:
    load = LoadConfig(rate_per_s=10, requests=12, probe_every=3, background_max_tokens=[4, 8])
    slots = schedule.slots(load, ["a", "b"], ["x", "y", "z"], 0)
    assert [s.probe for s in slots] == [True, False, False] * 4
    assert [s.prompt_id for s in slots if s.probe] == ["a", "b", "a", "b"]
    background = [s for s in slots if not s.probe]
    assert [s.max_tokens for s in background] == [4, 8] * 4
    assert {s.prompt_id for s in background} == {"x", "y", "z"}


def test_labels_say_the_load_point() -> None:
    assert schedule.label(LoadConfig(rate_per_s=8, concurrency=16)) == "poisson 8/s, at most 16 at once"
    assert schedule.label(LoadConfig(concurrency=8)) == "closed loop of 8"
    assert schedule.label(LoadConfig(rate_per_s=2.5, arrivals=Arrivals.gamma, gamma_shape=0.5)) == \
        "gamma (shape 0.5) 2.5/s"


def _protocol(load: LoadConfig) -> ProtocolConfig:
    return ProtocolConfig(name="p", phases={"load": PhaseConfig(PhaseKind.load, load=load)})


def test_plan_sends_each_window_as_one_group_with_stable_ids_and_roles() -> None:
    load = LoadConfig(rate_per_s=10, requests=8, windows=2, probe_every=4,
                      warmup=LoadWarmupConfig(requests=3, extend_windows=1))
    proto = _protocol(load)
    groups = list(protocol.plan(proto, "m", {"a": "A", "b": "B"}, background={"load": Background({"x": "X"})}))
    # the cold request, the warm-up, two windows, and one more sent only while not steady (run/send/extension.py)
    assert [len(g) for g in groups] == [1, 3, 8, 8, 8]
    assert {r.role for r in groups[1]} == {protocol.WARMUP}
    window = groups[2]
    assert [r.role for r in window][:4] == [protocol.MEASURED, protocol.BACKGROUND, protocol.BACKGROUND,
                                            protocol.BACKGROUND]
    assert window[0].request_id("arm") == "arm/a/load/0/0"
    assert window[1].request_id("arm") == "arm/background/load/0/1"
    assert groups[1][0].request_id("arm") == "arm/warmup/load/warmup/0"
    assert window[1].body["prompt"] == "X" and window[0].body["prompt"] == "A"
    assert [g[0].group_id("arm") for g in groups[1:]] == ["arm/load/warmup", "arm/load/0", "arm/load/1",
                                                         "arm/load/2"]
    ids = [r.request_id("arm") for g in groups for r in g]
    assert len(ids) == len(set(ids))
    assert protocol.requests_per_arm(proto, 2) == sum(len(g) for g in groups[:-1])  # what is sent at least
    assert protocol.cell_requests(proto.phases["load"], 2) == 2 * 1  # a probe of each prompt per window
    again = list(protocol.plan(proto, "m", {"a": "A", "b": "B"}, background={"load": Background({"x": "X"})}))
    assert [[r.offset_s for r in g] for g in again] == [[r.offset_s for r in g] for g in groups]


def test_probes_stream_only_where_the_engine_can() -> None:
    """Every shipped profile streams, so one that cannot is made here (an engine added without streaming)."""
    import dataclasses

    from orchestrator.engines import Capabilities, profile_for

    proto = _protocol(LoadConfig(rate_per_s=10, requests=4))
    silent = dataclasses.replace(profile_for("openai"), name="no_stream", capabilities=Capabilities(logprobs=True))
    for profile, streams in ((profile_for("reference"), True), (profile_for("openai"), True), (silent, False)):
        window = list(protocol.plan(proto, "m", {"a": "A"}, engine=profile))[1]
        assert all(("stream" in r.body) is streams for r in window), (profile.name, window[0].body)
