"""The load generator (run/load/generator.py) against a local HTTP/1.1 server on 127.0.0.1: real sockets, real
timing."""

from __future__ import annotations

import asyncio
import gc
import itertools
import socket
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from orchestrator.record.failures import TRANSPORT, ErrorKind
from orchestrator.run.load import clock, generator, pool
from orchestrator.run.wire import release
from orchestrator.run.wire.client import CompletionClient
from tests.unit.load_server import LoadServer

PATH = "/v1/completions"


def _requests(offsets: Sequence[float | None], stream: bool = False) -> list[generator.Prepared]:
    body = {"prompt": "x", "max_tokens": 4, **({"stream": True} if stream else {})}
    return [generator.Prepared(PATH, body, offset, stream) for offset in offsets]


def test_every_request_is_sent_at_its_time_and_answered_once() -> None:
    offsets = [i * 0.01 for i in range(40)]
    with LoadServer() as server:
        result = asyncio.run(generator.run_window(server.url, _requests(offsets)))
        assert len(server.arrivals_ns) == 40
    assert len(result.timed) == 40 and all(t.error is None and t.status == 200 for t in result.timed)
    for t, offset in zip(result.timed, offsets, strict=True):
        assert t.scheduled_ns == result.start_ns + round(offset * 1e9)
        assert t.send_ns >= t.scheduled_ns  # never early
        assert t.first_byte_ns is not None and t.send_ns <= t.first_byte_ns <= t.recv_ns
        assert t.streamed is False and t.first_token_ns is None and t.inter_token_ns is None


def test_streamed_answers_give_token_times() -> None:
    with LoadServer(tokens=4) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([0.0, 0.01], stream=True)))
    for t in result.timed:
        assert t.streamed and len(t.token_ns) == 4
        assert t.first_token_ns is not None and t.first_byte_ns is not None and t.first_token_ns >= t.first_byte_ns
        assert t.inter_token_ns is not None and len(t.inter_token_ns) == 3 and all(g > 0 for g in t.inter_token_ns)
        assert b"data:" in t.body


def test_a_closed_loop_never_exceeds_its_concurrency() -> None:
    with LoadServer(delay_s=0.02) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([None] * 24), concurrency=3))
        assert server.most_running == 3  # always 3 in flight, never more
    assert len(result.timed) == 24 and all(t.error is None for t in result.timed)


def test_a_closed_loop_with_a_duration_makes_requests_while_it_lasts() -> None:
    made: list[int] = []

    def more(seq: int) -> generator.Prepared:
        made.append(seq)
        return _requests([None])[0]

    with LoadServer(delay_s=0.01) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([None] * 2), concurrency=2, duration_s=0.3,
                                             more=more))
        assert len(server.arrivals_ns) == len(result.timed)
    assert made == list(range(2, len(result.timed)))  # asked in order, from past the planned ones
    assert len(result.timed) > 10 and all(t.error is None for t in result.timed)


def test_a_slot_waited_for_shifts_the_schedule_without_catching_up() -> None:
    # one slot, answers of 100 ms, requests every 10 ms: each waits for the previous answer, and the next is
    # scheduled 10 ms after that wait, not sent at once to catch up
    with LoadServer(delay_s=0.1) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([i * 0.01 for i in range(4)]), concurrency=1))
    sends = [t.send_ns for t in result.timed]
    scheduled = [t.scheduled_ns or 0 for t in result.timed]
    assert all(b - a >= 100_000_000 for a, b in itertools.pairwise(sends))
    for i in range(2, 4):  # scheduled 10 ms after the previous request's slot came (catching up: about 0)
        assert scheduled[i] - sends[i - 1] >= 5_000_000  # less than 10: a busy machine's pause between the two


def test_answers_past_the_grace_period_are_cut_and_recorded() -> None:
    with LoadServer(delay_s=1.0) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([0.0, 0.0]), grace_s=0.2))
    assert len(result.timed) == 2
    for t in result.timed:
        assert t.sent and t.status is None and t.error is not None and "grace_s=0.2" in t.error
        assert t.error_kind == ErrorKind.CUT


def test_an_answer_past_the_timeout_is_a_timeout_of_the_transport() -> None:
    with LoadServer(delay_s=1.0) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([0.0]), timeout_s=0.2, grace_s=5.0))
    [t] = result.timed
    assert (t.error, t.error_kind) == ("no answer in 0.2 s", ErrorKind.TIMEOUT) and t.error_kind in TRANSPORT


def test_a_refused_connection_is_recorded_as_refused() -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        result = asyncio.run(generator.run_window(url, _requests([0.0]), grace_s=0.2))
    [t] = result.timed
    assert not t.sent and t.error_kind == ErrorKind.REFUSED


def test_a_duration_that_ends_while_requests_wait_for_a_slot_leaves_them_unsent_with_a_row() -> None:
    with LoadServer(delay_s=0.3) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([i * 0.01 for i in range(10)]), concurrency=1,
                                             duration_s=0.2))
        answered = len(server.arrivals_ns)
    assert len(result.timed) == 10
    unsent = [t for t in result.timed if not t.sent]
    assert answered == 10 - len(unsent) and unsent
    assert all("duration_s=0.2" in (t.error or "") and t.error_kind == ErrorKind.CUT for t in unsent)


def test_running_requests_are_sampled_during_the_window() -> None:
    async def window(url: str) -> generator.WindowResult:
        client = httpx.AsyncClient(base_url=url)

        async def sample() -> int | None:
            return int((await client.get("/metrics")).text.split()[1])
        try:
            return await generator.run_window(url, _requests([None] * 8), concurrency=4, sample=sample)
        finally:
            await client.aclose()

    with LoadServer(delay_s=0.25) as server:
        result = asyncio.run(window(server.url))
    assert result.running and max(n for _, n in result.running) == 4
    assert result.running_max(result.start_ns, result.stop_ns + 10**9) == 4


def test_a_transport_standing_in_for_the_network_is_used_unstreamed() -> None:
    seen: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, json={"choices": [{"text": "hi"}]})

    async def window() -> generator.WindowResult:
        client = CompletionClient("http://engine", 10, transport=httpx.MockTransport(answer))
        try:
            return await generator.run_window(client, _requests([0.0, 0.01, 0.02], stream=True))
        finally:
            await client.aclose()

    result = asyncio.run(window())
    assert len(seen) == 3 and [t.status for t in result.timed] == [200] * 3
    assert all(not t.streamed and t.first_token_ns is None for t in result.timed)


def test_the_clock_returns_at_its_targets_without_spinning_a_core() -> None:
    async def waits() -> tuple[list[int], float, float]:
        ticks = clock.Clock()
        late: list[int] = []
        cpu, wall, start = time.thread_time(), time.perf_counter(), ticks.now()
        for i in range(1, 301):  # 1000 targets a second: the old 1 ms spin never slept at that rate
            await ticks.until(start + i * 1_000_000)
            late.append(ticks.now() - (start + i * 1_000_000))
        ticks.close()
        return late, time.thread_time() - cpu, time.perf_counter() - wall

    late, cpu_s, wall_s = asyncio.run(waits())
    assert min(late) >= 0  # never early
    assert cpu_s < 0.4 * wall_s  # a timerfd sleeps most of each gap (the yielded last 100 us is a tenth)


def test_a_request_with_no_idle_connection_takes_the_first_one_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    # one connection, opening another takes 0.5 s: the second request (5 ms in, the first answered at 50 ms)
    # goes on the first's connection once freed, not on one opened for it
    warm, opens = release.warm_connection, []

    async def slow_warm(*args: Any) -> Any:
        opens.append(1)
        if len(opens) > 1:
            await asyncio.sleep(0.5)
        return await warm(*args)

    monkeypatch.setattr(pool, "PREOPEN", 1)
    monkeypatch.setattr(release, "warm_connection", slow_warm)
    with LoadServer(delay_s=0.05) as server:
        result = asyncio.run(generator.run_window(server.url, _requests([0.0, 0.005])))
    first, second = result.timed
    assert first.error is None and second.error is None
    assert second.send_ns >= first.recv_ns  # it waited for the first's answer
    assert second.send_ns - (second.scheduled_ns or 0) < 200_000_000  # not for the 0.5 s open


def test_the_garbage_collector_is_off_during_a_window_and_restored_after() -> None:
    seen: list[bool] = []

    async def sample() -> int | None:
        seen.append(gc.isenabled())
        return 0

    with LoadServer(delay_s=0.05) as server:
        asyncio.run(generator.run_window(server.url, _requests([0.0, 0.01]), sample=sample))
    assert seen and not any(seen)
    assert gc.isenabled() and gc.get_freeze_count() == 0
