"""The load generator's requests and their HTTP/1.1 exchanges (run/load/generator.py sends a window through them):
keep-alive connections reused as answers end, each request's bytes made before the window and sent with one
`socket.send`, a request with no idle connection waiting in turn for the first one freed or opened."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11

from orchestrator.engines.stream import SseReader
from orchestrator.record.failures import ErrorKind
from orchestrator.run.load.clock import Clock
from orchestrator.run.wire import release
from orchestrator.run.wire.client import json_bytes
from orchestrator.run.wire.transport import Failed, failed, unanswered

PREOPEN = 8  # connections opened before a window without a concurrency ceiling
IDLE_NS = 2_000_000_000  # a connection idle longer is closed, not reused


@dataclass(frozen=True)
class Prepared:
    path: str
    body: dict[str, Any]
    offset_s: float | None = None  # None: a closed loop
    streamed: bool = False  # answered as server-sent events: token times read as they come


@dataclass
class Timed:
    """One request as it went: its answer's bytes and every time (wall clock, ns)."""

    status: int | None = None
    body: bytes = b""
    error: str | None = None
    scheduled_ns: int | None = None
    send_ns: int = 0
    first_byte_ns: int | None = None
    recv_ns: int = 0
    sent: bool = True
    streamed: bool = False
    token_ns: list[int] = field(default_factory=list)  # when each token-bearing event was complete
    error_kind: ErrorKind | None = None  # what failed, as data (record/failures.py)

    @property
    def first_token_ns(self) -> int | None:
        return self.token_ns[0] if self.streamed and self.token_ns else None

    @property
    def inter_token_ns(self) -> list[int] | None:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)] if self.streamed else None


class Sender:
    cut = "cut"  # the error of an answer cut by the grace period

    async def prepare(self, requests: Sequence[Prepared], concurrency: int | None) -> None:  # bytes, connections
        pass

    def start(self, request: Prepared, scheduled_ns: int | None) -> asyncio.Task[Timed]:
        raise NotImplementedError

    def close(self) -> None:  # connections left open are closed
        pass


class Pool(Sender):
    """Keep-alive connections, reused as answers end; requests' bytes made before the window."""

    def __init__(self, base_url: str, warm_path: str, timeout_s: float, clock: Clock) -> None:
        url = urlsplit(base_url)
        self.host, self.port, self.authority = url.hostname or "127.0.0.1", url.port or 80, url.netloc
        self.warm_path, self.timeout_s, self.clock = warm_path, timeout_s, clock
        self.idle: list[release.Connection] = []
        self.waiters: deque[asyncio.Future[release.Connection | None]] = deque()  # requests with none idle, in turn
        self.opened = 0
        self.ceiling: int | None = None
        self.addresses: Sequence[release.Address] | Failed = Failed(ErrorKind.CONNECT, "not resolved yet")
        self.unopened = Failed(ErrorKind.CONNECT, "no connection (not sent)")  # why the last one failed to open
        self.payloads: dict[int, tuple[bytes, list[Any]]] = {}  # id(request) -> its bytes, their h11 events
        self.all: list[release.Connection] = []
        self.used: dict[int, int] = {}  # id(connection) -> when it was warmed or its last answer ended

    async def prepare(self, requests: Sequence[Prepared], concurrency: int | None) -> None:
        self.ceiling = concurrency
        self.addresses = await release.resolve(self.host, self.port, 10.0)
        for request in requests:
            self._payload(request)
        want = min(concurrency or PREOPEN, max(len(requests), 1))
        await asyncio.gather(*(self._open() for _ in range(want)))

    def _payload(self, request: Prepared) -> tuple[bytes, list[Any]]:
        key = id(request)
        if key not in self.payloads:
            body = json_bytes(request.body)
            headers = [("Host", self.authority), ("Content-Type", "application/json"),
                       ("Content-Length", str(len(body)))]
            events = [h11.Request(method="POST", target=request.path, headers=headers), h11.Data(data=body),
                      h11.EndOfMessage()]
            scratch = h11.Connection(h11.CLIENT)
            self.payloads[key] = b"".join(scratch.send(e) or b"" for e in events), events
        return self.payloads[key]

    async def _open(self) -> None:
        if isinstance(self.addresses, Failed) or (self.ceiling is not None and self.opened >= self.ceiling):
            return
        self.opened += 1
        conn = await release.warm_connection(self.addresses, self.authority, self.warm_path, 10.0)
        if isinstance(conn, Failed):
            self.opened, self.unopened = self.opened - 1, conn
            if waiter := self._waiter():  # the request that asked for this connection goes unsent
                waiter.set_result(None)
            return
        self.all.append(conn)
        self._hand(conn)

    def _waiter(self) -> asyncio.Future[release.Connection | None] | None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():  # done: its request was cut meanwhile
                return waiter
        return None

    def _hand(self, conn: release.Connection) -> None:
        """A connection opened or freed goes to the request waiting longest, else back to the idle ones."""
        if waiter := self._waiter():
            waiter.set_result(conn)
            return
        self.used[id(conn)] = self.clock.now()
        self.idle.append(conn)

    def start(self, request: Prepared, scheduled_ns: int | None) -> asyncio.Task[Timed]:
        payload, events = self._payload(request)
        conn = self._fresh()
        if conn is None:
            return asyncio.create_task(self._waiting(request, payload, events, scheduled_ns))
        unsent, send_ns, error = self._send(conn, payload)
        if not self.idle:
            asyncio.get_running_loop().create_task(self._open())  # a spare for the next request
        return asyncio.create_task(self._read(conn, request, events, unsent, scheduled_ns, send_ns, error))

    def _fresh(self) -> release.Connection | None:
        """An idle connection used lately: an older one may have been closed by its server (uvicorn: 5 s idle)."""
        while self.idle:
            conn = self.idle.pop()
            if self.clock.now() - self.used[id(conn)] <= IDLE_NS:
                return conn
            self._drop(conn)
        return None

    async def _waiting(self, request: Prepared, payload: bytes, events: list[Any], scheduled_ns: int | None) -> Timed:
        """No idle connection: the first one freed or opened (one is opened for it, up to the ceiling)."""
        waiter: asyncio.Future[release.Connection | None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        asyncio.get_running_loop().create_task(self._open())
        try:
            conn = await waiter
        except asyncio.CancelledError:
            now = self.clock.now()
            return Timed(None, b"", self.cut + " (not sent: no connection came)", scheduled_ns, now, None, now,
                         False, request.streamed, error_kind=ErrorKind.CUT)
        if conn is None:
            now = self.clock.now()
            why = self.addresses if isinstance(self.addresses, Failed) else self.unopened
            return Timed(None, b"", why.said, scheduled_ns, now, None, now, False, request.streamed,
                         error_kind=why.kind)
        unsent, send_ns, error = self._send(conn, payload)
        return await self._read(conn, request, events, unsent, scheduled_ns, send_ns, error)

    def _send(self, conn: release.Connection, payload: bytes) -> tuple[bytes, int, Failed | None]:
        try:
            unsent = payload[conn.sock.send(payload):]
        except BlockingIOError:
            unsent = payload
        except OSError as exc:
            return payload, self.clock.now(), failed(exc, ErrorKind.WRITE, f"{type(exc).__name__}: {exc} (not sent)")
        return unsent, self.clock.now(), None

    async def _read(self, conn: release.Connection, request: Prepared, events: list[Any], unsent: bytes,
                    scheduled_ns: int | None, send_ns: int, error: Failed | None) -> Timed:
        timed = Timed(None, b"", None, scheduled_ns, send_ns, None, send_ns, error is None, request.streamed)
        if error is not None:
            timed.error, timed.error_kind = error.said, error.kind
            self._drop(conn)
            return timed
        for event in events:  # h11's side of the exchange, its bytes already sent (made on a scratch connection)
            conn.h11.send(event)
        reader, chunks, loop = SseReader() if request.streamed else None, [], asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                if unsent:
                    await loop.sock_sendall(conn.sock, unsent)
                while True:
                    event = conn.h11.next_event()
                    if event is h11.NEED_DATA:
                        data = await loop.sock_recv(conn.sock, release.READ_BYTES)
                        if timed.first_byte_ns is None and data:
                            timed.first_byte_ns = self.clock.now()
                        if not data and conn.h11.their_state is h11.SEND_RESPONSE:
                            raise h11.RemoteProtocolError("Server disconnected without sending a response.")
                        conn.h11.receive_data(data)
                    elif isinstance(event, h11.Response):
                        timed.status = event.status_code
                    elif isinstance(event, h11.Data):
                        chunks.append(bytes(event.data))
                        if reader is not None and (tokens := reader.feed(chunks[-1])):
                            timed.token_ns += [self.clock.now()] * tokens
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        raise release.NoAnswer("the server closed the connection before a whole answer")
        except asyncio.CancelledError:
            timed.error, timed.error_kind = self.cut, ErrorKind.CUT
        except (TimeoutError, OSError, release.NoAnswer, h11.ProtocolError) as exc:
            why = unanswered(exc, self.timeout_s)
            timed.error, timed.error_kind = why.said, why.kind
        timed.recv_ns, timed.body = self.clock.now(), b"".join(chunks)
        if timed.error is None:
            if timed.status is not None and not 200 <= timed.status < 300:
                timed.error, timed.error_kind = f"HTTP {timed.status}", ErrorKind.HTTP
            self._reuse(conn)
        else:
            timed.status = None if timed.error == self.cut or timed.status is None else timed.status
            self._drop(conn)
        return timed

    def _reuse(self, conn: release.Connection) -> None:
        if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            self._hand(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: release.Connection) -> None:
        conn.sock.close()
        self.opened -= 1
        if self.waiters:  # a replacement for those waiting
            asyncio.get_running_loop().create_task(self._open())

    def close(self) -> None:
        for conn in self.all:
            conn.sock.close()
