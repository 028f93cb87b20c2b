"""The batch release (run/wire/release.py) against a real HTTP server on loopback: every request of a batch in
flight together, one Exchange each with the exact bytes, and what goes wrong recorded, never raised."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.record.failures import ErrorKind
from orchestrator.run.send import protocol
from orchestrator.run.wire.client import CompletionClient
from orchestrator.run.wire.release import release


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True
    batch: threading.Barrier  # a POST is answered only once the whole batch has arrived
    warmed = 0
    lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.warmed += 1
        self._answer(200, b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/hang-up":
            self.connection.shutdown(socket.SHUT_RDWR)  # no answer at all
            return
        try:
            self.server.batch.wait(timeout=60)
        except threading.BrokenBarrierError:
            self._answer(500, b"the batch never arrived together")
            return
        self._answer(200, b'{"echo":' + body + b"}")


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


async def _released(base_url: str, requests: list[tuple[str, bytes]], timeout_s: float = 60):  # type: ignore[no-untyped-def]
    return await asyncio.gather(*await release(base_url, "/health", requests, timeout_s))


def test_a_batch_arrives_whole_each_request_on_a_warmed_connection(server: _Server) -> None:
    server.batch = threading.Barrier(200)  # past httpx's default pool limit of 100
    bodies = [json.dumps({"i": i}).encode() for i in range(200)]
    exchanges = asyncio.run(_released(_url(server), [("/v1/completions", b) for b in bodies]))
    assert [(e.status, e.error, e.sent) for e in exchanges] == [(200, None, True)] * 200
    assert [e.body for e in exchanges] == [b'{"echo":' + b + b"}" for b in bodies]
    assert server.warmed == 200
    assert all(e.recv_ns >= e.send_ns for e in exchanges)


def test_what_goes_wrong_is_one_exchange_each(server: _Server) -> None:
    server.batch = threading.Barrier(1)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
        [unsent] = asyncio.run(_released(refused, [("/v1/completions", b"{}")]))
    assert unsent.status is None and not unsent.sent and unsent.error_kind == ErrorKind.REFUSED
    assert (unsent.error or "").startswith("ConnectionRefusedError")
    [hung_up] = asyncio.run(_released(_url(server), [("/hang-up", b"{}")]))
    assert hung_up.status is None and hung_up.sent
    assert hung_up.error_kind == ErrorKind.PROTOCOL and "Server disconnected" in (hung_up.error or "")
    server.batch = threading.Barrier(2)  # one of two never comes: the server keeps the other waiting
    [late] = asyncio.run(_released(_url(server), [("/v1/completions", b"{}")], timeout_s=0.5))
    assert late.status is None and late.error_kind == ErrorKind.TIMEOUT and late.error == "no answer in 0.5 s"


def test_send_group_releases_through_the_sockets_and_records_the_spread(server: _Server) -> None:
    server.batch = threading.Barrier(8)
    group = [protocol.Request("p", "concurrent", protocol.PhaseKind.concurrent, 0, r, r, {"r": r})
             for r in range(8)]

    async def send() -> protocol.GroupResult:
        client = CompletionClient(_url(server), timeout_s=60)
        try:
            assert client.direct
            return await protocol.send_group(client, group, metrics_path=None)
        finally:
            await client.aclose()

    result = asyncio.run(send())
    assert [json.loads(e.body)["echo"] for e in result.exchanges] == [{"r": r} for r in range(8)]
    sends = [e.send_ns for e in result.exchanges]
    assert result.send_spread_ns == max(sends) - min(sends) and server.warmed == 8
