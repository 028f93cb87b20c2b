"""bench/recording_server.py records what it receives (each completion request, its route and when it was read)
and answers as an OpenAI-compatible server would; bench/load_pacing.py's measures on planted arrivals."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time

import httpx
import pytest

from tests import benches


async def _exchange(recording: object) -> tuple[list[httpx.Response], int, int]:
    server = await benches.load("recording_server").serve(recording)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    before = time.time_ns()
    async with server, httpx.AsyncClient(base_url=url) as client:  # one keep-alive connection for all
        answers = [await client.get("/health"), await client.get("/v1/models"),
                   await client.post("/v1/completions", json={"prompt": "a", "logprobs": 2}),
                   await client.post("/v1/chat/completions", json={"messages": [], "stream": True}),
                   await client.post("/v1/completions", json={"prompt": "b", "stream": True}),
                   await client.get("/nowhere")]
        after = time.time_ns()
        answers.append(await client.get("/_recorded"))
    return answers, before, after


def test_it_records_every_request_it_reads_in_order_and_answers_each() -> None:
    module = benches.load("recording_server")
    recording = module.Recording()
    answers, before, after = asyncio.run(_exchange(recording))
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 404, 200]
    assert [(a.method, a.path) for a in recording.arrivals] == [
        ("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"), ("GET", "/nowhere")]  # the control route /_recorded is not recorded
    times = [t for a in recording.arrivals for t in (a.first_ns, a.done_ns)]
    assert times == sorted(times) and before <= times[0] and times[-1] <= after
    assert [a.path for a in recording.completions()] == ["/v1/completions", "/v1/chat/completions", "/v1/completions"]
    assert [row[1] for row in json.loads(answers[-1].content)] == [a.path for a in recording.arrivals]
    assert {a.connection for a in recording.arrivals} == {0}  # kept alive: one connection brought them all

    completion = answers[2].json()["choices"][0]
    assert completion["text"] == " a b" and len(completion["logprobs"]["top_logprobs"]) == 2
    assert answers[3].headers["content-type"] == "text/event-stream"
    events = [line.removeprefix("data: ") for line in answers[4].text.split("\n\n") if line]
    assert events[-1] == "[DONE]" and "".join(json.loads(e)["choices"][0]["text"] for e in events[:2]) == " a b"


def test_a_request_in_pieces_is_recorded_once_when_whole() -> None:
    module = benches.load("recording_server")
    recording = module.Recording()

    async def pieces() -> bytes:
        server = await module.serve(recording)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = b'{"prompt": "x"}'
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
            await writer.drain()
            await asyncio.sleep(0.05)
            assert recording.arrivals == []  # headers alone are not a request
            writer.write(body)
            await writer.drain()
            answer = await reader.readuntil(b"\r\n\r\n")
            writer.close()
            return answer
    assert asyncio.run(pieces()).startswith(b"HTTP/1.1 200")
    [arrival] = recording.arrivals
    assert arrival.done_ns - arrival.first_ns >= 40_000_000  # read when the body came, ~50 ms after the line


def test_pacing_measures_on_planted_arrivals() -> None:
    bench = benches.load("load_pacing")
    gaps_ns = [0, 10_000_000, 20_000_000, 31_000_000, 40_000_000]  # 100/s, the fourth 1 ms late
    assert bench.achieved_rate(gaps_ns) == pytest.approx(100.0)
    assert bench.lateness_ms(gaps_ns, bench.constant_schedule(5, 100.0)) == pytest.approx([0, 0, 0, 1, 0])
    assert bench.lateness_ms([t + 5 for t in gaps_ns], bench.constant_schedule(5, 100.0))[3] == pytest.approx(1)
    assert bench.percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_its_service_times_are_the_same_set_over_any_hundred_requests_in_a_row() -> None:
    """bench/aiperf_compare.py gives two tools the same service times: any 100 in a row, whatever came before."""
    service = benches.load("recording_server").Service(0.1, 0.5, 0.01, 8)
    first = sorted(service.ttft_s(n) for n in range(100))
    assert sorted(service.ttft_s(n) for n in range(37, 137)) == first  # after a cold request or a warm-up
    assert len(set(first)) == 100 and first[49] < 0.1 < first[50]  # a lognormal of median 100 ms
    assert first[-1] > 2.5 * first[49]  # spread 0.5: the slowest 1 % about 3.2 times the median


def test_with_a_seed_each_request_draws_its_own_service_time() -> None:
    """bench/cost_calibration.py --planted recording: arms (and trials) of other seeds are served independent
    lognormal draws of the median and spread, the same again for the same seed and index."""
    module = benches.load("recording_server")
    a, b = module.Service(0.1, 0.5, 0.01, 8, seed=1), module.Service(0.1, 0.5, 0.01, 8, seed=2)
    draws = [a.ttft_s(n) for n in range(2000)]
    assert draws[:5] == [module.Service(0.1, 0.5, 0.01, 8, seed=1).ttft_s(n) for n in range(5)]  # reproducible
    assert sorted(draws[:100]) != sorted(draws[100:200])  # no cycle: another hundred, other times
    assert all(x != y for x, y in zip(draws, (b.ttft_s(n) for n in range(2000)), strict=True))  # another seed
    logs = [math.log(d / 0.1) for d in draws]
    assert abs(statistics.median(logs)) < 0.05 and abs(statistics.stdev(logs) - 0.5) < 0.03
    assert abs(statistics.correlation(logs[:-1], logs[1:])) < 0.1  # each request's own draw
