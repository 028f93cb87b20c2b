"""A local HTTP/1.1 keep-alive server for the load generator's tests and benchmarks: it answers every POST with
a completion (server-sent events when the body asks for `stream`), GET /health with 200 and GET /metrics with
the requests in flight; `delay_s` holds each answer. It runs its own event loop in a thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any


class LoadServer:
    def __init__(self, delay_s: float = 0.0, tokens: int = 4) -> None:
        self.delay_s, self.tokens = delay_s, tokens
        self.arrivals_ns: list[int] = []  # when each POST's body was read
        self.running = self.most_running = 0
        self.bodies: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def __enter__(self) -> LoadServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
                body = await reader.readexactly(length) if length else b""
                if method == "GET":
                    text = f"running {self.running}\n" if path == "/metrics" else "ok"
                    writer.write(_response(text.encode(), "text/plain"))
                    continue
                self.arrivals_ns.append(time.time_ns())
                doc = json.loads(body)
                self.bodies.append(doc)
                self.running += 1
                self.most_running = max(self.most_running, self.running)
                try:
                    await self._answer(writer, doc)
                finally:
                    self.running -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, doc: dict[str, Any]) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = ["a", "b", "c", "d", "e", "f", "g", "h"][: self.tokens]
        if not doc.get("stream"):
            writer.write(_response(json.dumps(_completion("".join(text))).encode(), "application/json"))
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i, token in enumerate(text):
            finish = "length" if i == len(text) - 1 else None
            event = {"choices": [{"index": 0, "text": token, "finish_reason": finish}]}
            _chunk(writer, f"data: {json.dumps(event)}\n\n".encode())
            await writer.drain()
            await asyncio.sleep(0.002)
        _chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")


def _completion(text: str) -> dict[str, Any]:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": len(text), "total_tokens": 3 + len(text)}}


def _response(body: bytes, kind: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
