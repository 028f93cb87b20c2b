"""A recording server for pacing benchmarks (bench/load_pacing.py): OpenAI-compatible enough for a load
generator (POST /v1/completions and /v1/chat/completions, GET /health and /v1/models; server-sent events when
the body asks `"stream": true`, an immediate tiny answer otherwise; HTTP/1.1 keep-alive), and it records when
each request arrived: `first_ns` (time.time_ns when the first byte of its request line was read) and `done_ns`
(when its whole body was read). A raw asyncio.Protocol, so 1000 requests/s cost little; run it in its own
process so it does not share the client's event loop:

    .venv/bin/python bench/recording_server.py --port 0      # prints "listening on http://127.0.0.1:PORT"
    .venv/bin/python bench/recording_server.py --port 0 --ttft-ms 40 --spread 0.5 --gap-ms 5 --tokens 8

With `--ttft-ms` it has a known service time (bench/aiperf_compare.py): the n-th completion request it reads
sends its first token chunk `ttft` after it was read and each later token `gap` after the one before; `ttft` is
the lognormal quantile ((37 n mod 100) + 0.5) / 100 of median `--ttft-ms` and log spread `--spread` (0: every
request alike). Any 100 requests in a row (any multiple of 100) get the same service times, whatever came
before: two clients that each send a multiple of 100 see the same distribution. With `--seed N` the n-th
request's `ttft` is instead an independent lognormal draw of that median and spread, the same for the same N and
n (bench/cost_calibration.py --planted recording: two arms, or two trials, served independent times, so an
interval on their ratio has a sampling error to cover). Requests run side by side (no capacity limit).

Control routes, never recorded: GET /_recorded (the records as JSON: [[method, path, first_ns, done_ns,
connection], ...]) and POST /_reset (forget them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field

MODEL = "recording"
COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")
TOKENS = (" a", " b")  # every answer: two tokens, unless a service time says how many
CYCLE = 100  # the service times repeat every CYCLE completion requests


@dataclass(frozen=True)
class Service:
    """A known service time: the n-th completion request's first token after `ttft`, then a token every `gap_s`."""

    ttft_median_s: float
    spread: float  # the log-normal's sigma
    gap_s: float
    tokens: int
    seed: int | None = None  # None: the quantile cycle; else each request's own draw

    def ttft_s(self, n: int) -> float:
        if self.seed is None:
            q = ((37 * n) % CYCLE + 0.5) / CYCLE  # 37 is prime to 100: each quantile once per cycle
            z = statistics.NormalDist().inv_cdf(q)
        else:  # seeded by (seed, n), not one stream: draw n is known without drawing those before it
            z = random.Random(f"{self.seed}/{n}").gauss(0.0, 1.0)
        return self.ttft_median_s * math.exp(self.spread * z)


@dataclass(frozen=True)
class Arrival:
    method: str
    path: str
    first_ns: int  # the first byte of the request line read
    done_ns: int  # the whole request (headers and body) read
    connection: int  # which connection brought it: 0, 1, ... in the order they were accepted


@dataclass
class Recording:
    arrivals: list[Arrival] = field(default_factory=list)
    connections: int = 0  # accepted so far
    service: Service | None = None  # None: every answer at once
    served: int = 0  # completion requests answered so far (their service time's index)

    def completions(self) -> list[Arrival]:
        """The completion requests, in order of arrival (what a pacing benchmark counts)."""
        return sorted((a for a in self.arrivals if a.method == "POST" and a.path in COMPLETION_PATHS),
                      key=lambda a: a.done_ns)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: requests parsed from a buffer as they complete (pipelining included)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.buffer = bytearray()
        self.first_ns: int | None = None  # of the request being read
        self.transport: asyncio.Transport | None = None
        self.serial = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.serial, self.recording.connections = self.recording.connections, self.recording.connections + 1

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        if self.first_ns is None:
            self.first_ns = now
        self.buffer += data
        while self.transport is not None and not self.transport.is_closing():
            request = self._take_request()
            if request is None:
                return
            method, path, headers, body = request
            first_ns, self.first_ns = self.first_ns or now, now if self.buffer else None
            self._answer(method, path, headers, body, first_ns, now)

    def _take_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return None
        body = bytes(self.buffer[end + 4:end + 4 + length])
        del self.buffer[:end + 4 + length]
        method, _, rest = lines[0].partition(" ")
        return method, rest.partition(" ")[0].split("?")[0], headers, body

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes, first_ns: int,
                done_ns: int) -> None:
        assert self.transport is not None
        close = headers.get("connection", "").lower() == "close"
        if path == "/_recorded":
            rows = [[a.method, a.path, a.first_ns, a.done_ns, a.connection] for a in self.recording.arrivals]
            self._send(200, "application/json", json.dumps(rows).encode(), close)
            return
        if path == "/_reset":
            self.recording.arrivals.clear()
            self._send(200, "application/json", b"{}", close)
            return
        self.recording.arrivals.append(Arrival(method, path, first_ns, done_ns, self.serial))
        if method == "GET" and path == "/health":
            self._send(200, "application/json", b"{}", close)
        elif method == "GET" and path == "/v1/models":
            models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench",
                                                  "max_model_len": 4096}]}
            self._send(200, "application/json", json.dumps(models).encode(), close)
        elif method == "POST" and path in COMPLETION_PATHS:
            try:
                request = json.loads(body) if body else {}
            except ValueError:
                request = {}
            chat = path.endswith("chat/completions")
            request = request if isinstance(request, dict) else {}
            service = self.recording.service
            tokens: tuple[str, ...] = TOKENS
            if service is not None:
                tokens = tuple(f" t{i}" for i in range(service.tokens))
            if request.get("stream"):
                events = _events(request, chat, tokens)
                if service is None:
                    self._send(200, "text/event-stream", b"".join(events), close)
                else:
                    self._later(service, events, close)
            else:
                answer = json.dumps(_completion(request, chat, tokens)).encode()
                if service is None:
                    self._send(200, "application/json", answer, close)
                else:
                    self._later(service, [answer], close, "application/json")
        else:
            self._send(404, "application/json", b'{"error": {"message": "no such route"}}', close)

    def _later(self, service: Service, pieces: list[bytes], close: bool, content_type: str = "text/event-stream"
               ) -> None:
        """The answer in pieces at its service times: the head and the first piece at ttft, each token's event
        a gap later (the last piece, usage and [DONE], with the last token); unstreamed: all of it at the end."""
        assert self.transport is not None
        ttft_s, self.recording.served = service.ttft_s(self.recording.served), self.recording.served + 1
        head = (f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {sum(map(len, pieces))}"
                f"\r\nconnection: {'close' if close else 'keep-alive'}\r\n\r\n").encode()
        loop, transport = asyncio.get_running_loop(), self.transport
        if len(pieces) == 1:  # unstreamed: the whole answer once its last token is made
            loop.call_later(ttft_s + (service.tokens - 1) * service.gap_s, transport.write, head + pieces[0])
        else:
            *tokens, rest = pieces
            for i, piece in enumerate(tokens):
                last = i == len(tokens) - 1
                loop.call_later(ttft_s + i * service.gap_s, transport.write,
                                (head if i == 0 else b"") + piece + (rest if last else b""))
        if close:
            loop.call_later(ttft_s + service.tokens * service.gap_s, transport.close)

    def _send(self, status: int, content_type: str, payload: bytes, close: bool) -> None:
        assert self.transport is not None
        reason = "OK" if status == 200 else "Not Found"
        head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {len(payload)}"
                f"\r\nconnection: {'close' if close else 'keep-alive'}\r\n\r\n")
        self.transport.write(head.encode() + payload)
        if close:
            self.transport.close()


def _choice(request: dict[str, object], chat: bool, tokens: tuple[str, ...], finish: str | None
            ) -> dict[str, object]:
    text = "".join(tokens)
    if chat:
        return {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
    k = request.get("logprobs")
    logprobs = None
    if isinstance(k, int) and not isinstance(k, bool) and k > 0:  # one entry per token, as an engine gives
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        logprobs = {"tokens": list(tokens), "token_logprobs": [-0.1] * len(tokens),
                    "top_logprobs": [{f"{t}{j}": -0.1 * (j + 1) for j in range(k)} for t in tokens],
                    "text_offset": offsets}
    return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}


def _usage(tokens: tuple[str, ...]) -> dict[str, int]:
    return {"prompt_tokens": 1, "completion_tokens": len(tokens), "total_tokens": 1 + len(tokens)}


def _completion(request: dict[str, object], chat: bool, tokens: tuple[str, ...] = TOKENS) -> dict[str, object]:
    return {"id": "cmpl-rec", "object": "chat.completion" if chat else "text_completion", "created": 0,
            "model": MODEL, "choices": [_choice(request, chat, tokens, "stop")], "usage": _usage(tokens)}


def _events(request: dict[str, object], chat: bool, tokens: tuple[str, ...] = TOKENS) -> list[bytes]:
    """The answer as server-sent events: a chunk per token, then one piece with usage and [DONE]."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    out = []
    for i, token in enumerate(tokens):
        finish = "stop" if i == len(tokens) - 1 else None
        chunk = ({"index": 0, "delta": {"content": token}, "finish_reason": finish} if chat
                 else _choice(request, chat, (token,), finish))
        doc = {"id": "cmpl-rec", "object": kind, "created": 0, "model": MODEL, "choices": [chunk]}
        out.append(f"data: {json.dumps(doc)}\n\n")
    usage = {"id": "cmpl-rec", "object": kind, "created": 0, "model": MODEL, "choices": [], "usage": _usage(tokens)}
    out.append(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n")
    return [event.encode() for event in out]


async def serve(recording: Recording, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Listening, recording into `recording`; port 0 picks a free one (server.sockets[0].getsockname())."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Connection(recording), host, port, backlog=4096)


async def _main(host: str, port: int, service: Service | None) -> None:
    server = await serve(Recording(service=service), host, port)
    print(f"listening on http://{host}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ttft-ms", type=float, help="a known service time: the median time to first token")
    parser.add_argument("--spread", type=float, default=0.0, help="its log spread (sigma)")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="between tokens")
    parser.add_argument("--tokens", type=int, default=8, help="per answer")
    parser.add_argument("--seed", type=int, help="each request's time to first token an independent lognormal draw "
                        "(seeded by this and its index), not the quantile cycle")
    args = parser.parse_args()
    timed = None if args.ttft_ms is None else Service(args.ttft_ms / 1e3, args.spread, args.gap_ms / 1e3, args.tokens,
                                                      args.seed)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port, timed))
