"""A load phase's window as the protocol sends it: its requests prepared, sent by run/load/generator.py, and then, once
the window is over (never while it sends), one `responses` row per request with its load timings.

Co-residency of a probe: where the engine traces its requests (server_* fields) the analysis reads the trace;
else, where it counts running requests on its metrics endpoint, the most it showed while the probe was in
flight goes in `batch_running_max` (null: no sample fell within it, or no such count).

`prefix_seen`: the prompt a request starts with (its whole prompt, or the prefix a background request reuses) was
sent before in the window, whole or as the start of another's, by sending order: what a prefix cache could serve."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from orchestrator.engines import EngineProfile
from orchestrator.run.load import generator
from orchestrator.run.load.schedule import WARMUP_WINDOW, window_pace
from orchestrator.run.send import protocol
from orchestrator.run.wire.client import CompletionClient, Exchange


async def send_window(client: CompletionClient, group: list[protocol.Request], metrics_path: str | None,
                      health_path: str, engine: EngineProfile,
                      row: Callable[[protocol.Request, Exchange], dict[str, Any]]) -> list[dict[str, Any]]:
    """Send one window (a group of protocol.plan) and return its rows, in sending order; `row` makes a
    request's base row (sending.response_row with the run's context)."""
    window = group[0].window
    assert window is not None, "a load group's requests carry their window"
    pace = window_pace(window.load, window.index == WARMUP_WINDOW)
    streamed = window.streamed and client.direct  # a transport standing in for the network answers unstreamed
    requests = list(group)

    def more(seq: int) -> generator.Prepared:
        requests.append(protocol.load_request(window, seq, None))
        return _prepared(requests[-1], streamed)

    sample = None
    if metrics_path and engine.running_metric:
        async def sample() -> int | None:
            exchange = await client.request("GET", metrics_path)
            return engine.running_requests(exchange.body.decode("utf-8", "replace")) \
                if exchange.status == 200 else None
    result = await generator.run_window(
        client, [_prepared(r, streamed) for r in group], concurrency=pace.concurrency, duration_s=pace.duration_s,
        grace_s=window.load.grace_s, timeout_s=client.timeout_s, warm_path=health_path,
        more=more if pace.rate_per_s is None and pace.duration_s is not None else None, sample=sample)
    rows = []
    rate = pace.rate_per_s
    led: set[str] = set()  # the prompts a request of the window started with so far (their hashes)
    for request, timed in zip(requests, result.timed, strict=True):
        base = row(request, Exchange(timed.status, timed.body, timed.error, timed.send_ns, timed.recv_ns,
                                     timed.sent, timed.error_kind))
        lead = window.lead(request.prompt_id) if request.body is not window.probes.get(request.prompt_id) else None
        start = base["prompt_sha256"] if lead is None else hashlib.sha256(window.texts[lead].encode()).hexdigest()
        base["prefix_seen"] = start in led
        led.add(start)
        base.update(scheduled_ns=timed.scheduled_ns, first_byte_ns=timed.first_byte_ns, streamed=timed.streamed,
                    first_token_ns=timed.first_token_ns, inter_token_ns=timed.inter_token_ns,
                    load_point=window.label, offered_rate_per_s=rate)
        if request.role == protocol.MEASURED and result.running:
            base["batch_running_max"] = result.running_max(timed.send_ns, timed.recv_ns)
        rows.append(base)
    return rows


def _prepared(request: protocol.Request, streamed: bool) -> generator.Prepared:
    return generator.Prepared(request.path, request.body, request.offset_s, streamed)
