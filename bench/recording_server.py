"""A recording server for pacing benchmarks (bench/load_pacing.py): OpenAI-compatible enough for a load
generator (POST /v1/completions and /v1/chat/completions, GET /health and /v1/models; server-sent events when
the body asks `"stream": true`, an immediate tiny answer otherwise; HTTP/1.1 keep-alive), and it records when
each request arrived: `first_ns` (time.time_ns when the first byte of its request line was read) and `done_ns`
(when its whole body was read). A raw asyncio.Protocol, so 1000 requests/s cost little; run it in its own
process so it does not share the client's event loop:

    .venv/bin/python bench/recording_server.py --port 0      # prints "listening on http://127.0.0.1:PORT"

Control routes, never recorded: GET /_recorded (the records as JSON: [[method, path, first_ns, done_ns,
connection], ...]) and POST /_reset (forget them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field

MODEL = "recording"
COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")
TOKENS = (" a", " b")  # every answer: two tokens


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
            if isinstance(request, dict) and request.get("stream"):
                self._send(200, "text/event-stream", _events(request, chat), close)
            else:
                answer = _completion(request if isinstance(request, dict) else {}, chat)
                self._send(200, "application/json", json.dumps(answer).encode(), close)
        else:
            self._send(404, "application/json", b'{"error": {"message": "no such route"}}', close)

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


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 1, "completion_tokens": len(TOKENS), "total_tokens": 1 + len(TOKENS)}


def _completion(request: dict[str, object], chat: bool) -> dict[str, object]:
    return {"id": "cmpl-rec", "object": "chat.completion" if chat else "text_completion", "created": 0,
            "model": MODEL, "choices": [_choice(request, chat, TOKENS, "stop")], "usage": _usage()}


def _events(request: dict[str, object], chat: bool) -> bytes:
    """The answer as server-sent events, a chunk per token, then usage and [DONE]."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    out = []
    for i, token in enumerate(TOKENS):
        finish = "stop" if i == len(TOKENS) - 1 else None
        chunk = ({"index": 0, "delta": {"content": token}, "finish_reason": finish} if chat
                 else _choice(request, chat, (token,), finish))
        doc = {"id": "cmpl-rec", "object": kind, "created": 0, "model": MODEL, "choices": [chunk]}
        out.append(f"data: {json.dumps(doc)}\n\n")
    usage = {"id": "cmpl-rec", "object": kind, "created": 0, "model": MODEL, "choices": [], "usage": _usage()}
    out.append(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n")
    return "".join(out).encode()


async def serve(recording: Recording, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Listening, recording into `recording`; port 0 picks a free one (server.sockets[0].getsockname())."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Connection(recording), host, port, backlog=4096)


async def _main(port: int) -> None:
    server = await serve(Recording(), port=port)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(parser.parse_args().port))
