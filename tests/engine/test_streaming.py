"""Streamed answers of the real server (`"stream": true`) and the planted cost (--step-delay-ms): a stream
parses, through the orchestrator's reference profile, to the unstreamed answer; tokens come as they are
sampled, on a kept-alive connection; the planted delay costs what it says and changes no answer."""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import time

import pytest
from refengine.config import EngineConfig
from refengine.server import build_app, make_server, serve_in_thread

from orchestrator.engines import reference
from orchestrator.engines.stream import SseReader

STEP_DELAY_MS = 40.0
REQUEST = {"prompt": "Grüße, wörld", "max_tokens": 12, "temperature": 0, "logprobs": 5, "prompt_logprobs": 2,
           "return_token_ids": True, "return_tokens_as_token_ids": True, "ignore_eos": True}


def _server(step_delay_ms: float):
    cfg = EngineConfig(served_model_name="tiny", max_model_len=1024, batch_window_ms=1, step_delay_ms=step_delay_ms)
    app = build_app(cfg, log_startup=False)
    server = make_server(app, "127.0.0.1", 0)
    serve_in_thread(server)
    return app, server


@pytest.fixture(scope="module")
def ports():
    started = [_server(0.0), _server(STEP_DELAY_MS)]
    yield [server.server_address[1] for _, server in started]
    for app, server in started:
        server.shutdown()
        server.server_close()
        app.scheduler.stop()


def _post(conn: http.client.HTTPConnection, body: dict) -> tuple[http.client.HTTPResponse, bytes, list[float]]:
    """The response, its body, and when (s after sending) each token-bearing event was read."""
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    reader, raw, times = SseReader(), b"", []
    while data := response.read1(65536):
        raw += data
        times += [time.perf_counter() - start] * reader.feed(data)
    raw += response.read()  # releases the connection (read1 leaves a Content-Length answer open at its end)
    return response, raw, times


def _fields(body: bytes) -> dict:
    parsed = dataclasses.asdict(reference.PROFILE.parse(body))
    return {k: v for k, v in parsed.items() if k not in ("server_arrival_ns", "server_steps")}


@pytest.mark.parametrize("usage", [True, False])
def test_a_streamed_answer_parses_as_the_unstreamed_one(ports, usage: bool) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=60)
    _, plain, _ = _post(conn, REQUEST)
    options = {"stream_options": {"include_usage": True}} if usage else {}
    response, streamed, times = _post(conn, {**REQUEST, "stream": True, **options})  # the same connection
    assert response.getheader("Content-Type") == "text/event-stream"
    assert response.getheader("Transfer-Encoding") == "chunked"
    assert len(times) == REQUEST["max_tokens"]  # one event per token
    assert streamed.endswith(b"data: [DONE]\n\n")
    want = _fields(plain)
    if not usage:  # usage comes only with include_usage, as in vLLM
        want.update(prompt_tokens=None, completion_tokens=None, cached_prompt_tokens=None)
    assert _fields(streamed) == want and not want["problems"]
    assert want["prompt_logprobs"] and len(want["tokens"]) == 12
    assert reference.PROFILE.parse(streamed).server_steps is not None


def test_tokens_are_sent_as_sampled_and_the_planted_delay_costs_what_it_says(ports) -> None:
    plain_fast = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=60)
    plain_slow = http.client.HTTPConnection("127.0.0.1", ports[1], timeout=60)
    _, fast_body, _ = _post(plain_fast, REQUEST)
    _, slow_streamed, times = _post(plain_slow, {**REQUEST, "stream": True})
    _, slow_body, _ = _post(plain_slow, REQUEST)
    assert _fields(slow_body) == _fields(fast_body)  # the switch changes no answer
    assert reference.PROFILE.parse(slow_streamed).tokens == _fields(fast_body)["tokens"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    steps = REQUEST["max_tokens"]  # the prefill, then a decode step per token after the first
    assert times[0] >= STEP_DELAY_MS / 1000 and min(gaps) >= 0.9 * STEP_DELAY_MS / 1000  # flushed per step
    assert times[-1] >= steps * STEP_DELAY_MS / 1000
    assert times[-1] - times[0] >= 0.9 * (steps - 1) * STEP_DELAY_MS / 1000  # not sent all at once at the end


def test_stream_errors(ports) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=60)
    for body, message in (({**REQUEST, "stream": True, "echo": True}, "send echo or stream"),
                          ({**REQUEST, "stream_options": {"include_usage": True}}, "only be defined when")):
        conn.request("POST", "/v1/completions", json.dumps(body))
        response = conn.getresponse()
        assert response.status == 400 and message in json.loads(response.read())["error"]["message"]


def test_max_tokens_zero_streams_a_finish(ports) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=60)
    _, streamed, times = _post(conn, {**REQUEST, "max_tokens": 0, "stream": True})
    parsed = reference.PROFILE.parse(streamed)
    assert times == [] and parsed.completion_text == "" and parsed.finish_reason == "length" and not parsed.problems
