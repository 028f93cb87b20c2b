"""The warm-up extended until steady (run/send/extension.py, `load.warmup.extend_windows`): a further window is sent
while the windows before it have no steady part or too few steady windows, never once they have enough, and is
left undecided while a window before it is unrecorded (so `run --resume` decides as the run did)."""

from __future__ import annotations

import random
from typing import Any

from orchestrator.config.schema import (
    LoadConfig,
    LoadSeriesConfig,
    LoadWarmupConfig,
    PhaseConfig,
    PhaseKind,
    ProtocolConfig,
)
from orchestrator.run.send import protocol
from orchestrator.run.send.extension import WarmupExtension

PER_WINDOW = 12


def _proto(extend: int = 3, windows: int = 6) -> ProtocolConfig:
    load = LoadConfig(rate_per_s=10, requests=PER_WINDOW, windows=windows,
                      warmup=LoadWarmupConfig(extend_windows=extend))
    return ProtocolConfig(name="p", phases={"load": PhaseConfig(PhaseKind.load, load=load)})


def _rows(windows: range, slow_until: int = 0, seed: int = 0, rising: bool = False) -> list[dict[str, Any]]:
    """PER_WINDOW requests a window, 0.1 s apart; latency about 50 ms, 4x for the first `slow_until` requests
    (a planted warm-up), or rising tenfold throughout (`rising`: never steady)."""
    out = []
    for w in windows:
        for seq in range(PER_WINDOW):
            n = w * PER_WINDOW + seq
            latency_s = 0.05 * random.Random(seed * 100_000 + n).lognormvariate(0, 0.2)
            latency_s *= (4 if n < slow_until else 1) * (1 + n / 8 if rising else 1)
            send_ns = int(n * 0.1e9)
            out.append({"phase": "load", "role": protocol.MEASURED if seq % 4 == 0 else protocol.BACKGROUND,
                        "start": 0, "batch_id": w, "request_id": f"a/{w}/{seq}", "send_ns": send_ns,
                        "recv_ns": send_ns + int(latency_s * 1e9), "error": None})
    return out


def test_a_steady_load_point_sends_no_further_window() -> None:
    rule = WarmupExtension(_proto())
    rule.observe(_rows(range(6)))
    assert rule.wanted("load", 5) is True  # a planned window is always sent
    assert [rule.wanted("load", w) for w in (6, 7, 8)] == [False, False, False]


def test_a_planted_warm_up_is_extended_by_the_windows_it_took_then_stops() -> None:
    """Slow for two windows: MSER-5 keeps them out, so two further windows are sent, and no third."""
    rule = WarmupExtension(_proto())
    rule.observe(_rows(range(6), slow_until=2 * PER_WINDOW))
    assert rule.wanted("load", 6) is True
    rule.observe(_rows(range(6, 7), slow_until=2 * PER_WINDOW))
    assert rule.wanted("load", 7) is True
    rule.observe(_rows(range(7, 8), slow_until=2 * PER_WINDOW))
    assert rule.wanted("load", 8) is False


def test_a_server_that_never_settles_gets_every_further_window_and_no_more() -> None:
    proto = _proto(extend=2)
    rule = WarmupExtension(proto)
    rule.observe(_rows(range(6), rising=True))
    assert rule.wanted("load", 6) is True
    rule.observe(_rows(range(6, 7), rising=True))
    assert rule.wanted("load", 7) is True
    groups = [g for g in protocol.plan(proto, "m", {"a": "A"}) if g[0].window is not None]
    assert [g[0].window.index for g in groups if g[0].window] == list(range(8))  # the bound: 6 + 2


def test_a_further_window_waits_for_every_window_before_it() -> None:
    rule = WarmupExtension(_proto())
    rule.observe([r for r in _rows(range(6), slow_until=2 * PER_WINDOW) if r["batch_id"] != 4])
    assert rule.wanted("load", 6) is None  # window 4 not recorded (a stopped run): told when it is reached
    rule.observe([r for r in _rows(range(6), slow_until=2 * PER_WINDOW) if r["batch_id"] == 4])
    assert rule.wanted("load", 6) is True


def test_resolve_leaves_out_only_a_further_window_that_is_not_needed() -> None:
    proto = _proto()
    rule = WarmupExtension(proto)
    rule.observe(_rows(range(6)))
    groups = {g[0].window.index: g for g in protocol.plan(proto, "m", {"a": "A"}) if g[0].window is not None}
    assert rule.resolve(groups[5]) is groups[5]
    assert rule.resolve(groups[6]) is None
    off = WarmupExtension(_proto(extend=0))
    assert not off.loads and off.wanted("load", 6) is True  # 0: no further window is planned to ask about


def test_rows_of_other_roles_and_starts_do_not_count() -> None:
    """The warm-up's rows and a later start's are not the load point's counted requests."""
    rule = WarmupExtension(_proto())
    rows = _rows(range(6))
    rule.observe([{**r, "start": 1} for r in rows] + [{**r, "role": protocol.WARMUP} for r in rows])
    assert rule.wanted("load", 6) is None


def test_a_series_point_is_not_extended() -> None:
    """Past saturation a point's backlog only grows: the series stops there, its points get no further window."""
    load = LoadConfig(requests=PER_WINDOW, windows=2, series=LoadSeriesConfig(points=3))
    proto = ProtocolConfig(name="p", phases={"sat": PhaseConfig(PhaseKind.load, load=load)})
    windows = [(g[0].phase, g[0].window.index) for g in protocol.plan(proto, "m", {"a": "A"}) if g[0].window]
    assert windows == [(f"sat@{k}", w) for k in range(3) for w in range(2)]
    assert not WarmupExtension(proto).loads
