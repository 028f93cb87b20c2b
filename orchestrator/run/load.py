"""Sending one window of a load point (docs/load.md): each request at its scheduled time, answers read as they
arrive, and every request's timings kept raw (rows are made after the window, run/sending.py).

The entry point, for the protocol and for benchmarks alike:

    result = await run_window(base_url, [Prepared(path, body, offset_s), ...], concurrency=16, grace_s=30)

`offset_s` is when the request is meant to leave, from the window's start (all None: a closed loop of
`concurrency`, each answer starting the next; `more(seq)` makes requests past the list while a `duration_s`
lasts). With a rate and a concurrency it sleeps, then waits for a slot (AIPerf's sleep-then-gate): a slot
waited for shifts the rest of the schedule by that wait, never caught up. `result.timed[i]` is the i-th
request's Timed (every request has one, also those cut by the grace period or left unsent by the duration).

Pacing: sleep until about 1 ms before the target (the loop's timers are ms-grained), then yield until it
(perf_counter_ns); times are wall-clock ns through one monotonic-to-wall offset per window. Keep-alive HTTP/1.1
connections (h11, warmed as run/release.py warms a batch's), bytes made before the window, one `socket.send`
each; a spare connection is opened whenever the last idle one is taken, up to the concurrency. A client with
a transport (tests) sends through httpx, unstreamed. docs/load.md has the measured limits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11

from orchestrator.engines.stream import SseReader
from orchestrator.run import release
from orchestrator.run.client import CompletionClient, json_bytes

SPIN_NS = 1_000_000  # the last stretch before a send is yielded through, not slept
LEAD_NS = 20_000_000  # the window starts this long after its connections are warm
SAMPLE_S = 0.1  # running requests on the metrics endpoint, sampled this often during a window
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

    @property
    def first_token_ns(self) -> int | None:
        return self.token_ns[0] if self.streamed and self.token_ns else None

    @property
    def inter_token_ns(self) -> list[int] | None:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)] if self.streamed else None


@dataclass
class WindowResult:
    timed: list[Timed]
    running: list[tuple[int, int]]  # (wall ns, running requests) sampled on the metrics endpoint meanwhile
    start_ns: int
    stop_ns: int  # the last send (or the duration's end)

    def running_max(self, start_ns: int, end_ns: int) -> int | None:
        """Most running requests seen between two times; None: no sample fell between them."""
        seen = [n for t, n in self.running if start_ns <= t <= end_ns]
        return max(seen) if seen else None


class _Clock:
    def __init__(self) -> None:
        self.offset_ns = time.time_ns() - time.perf_counter_ns()  # taken once: wall times stay monotonic

    def now(self) -> int:
        return time.perf_counter_ns() + self.offset_ns

    async def until(self, target_ns: int) -> None:
        while (left := target_ns - self.now()) > 0:
            await asyncio.sleep((left - SPIN_NS) / 1e9 if left > 2 * SPIN_NS else 0)


async def run_window(base_url: str | CompletionClient, requests: Sequence[Prepared], *, concurrency: int | None = None,
                     duration_s: float | None = None, grace_s: float = 30.0, timeout_s: float = 300.0,
                     warm_path: str = "/health", more: Callable[[int], Prepared] | None = None,
                     sample: Callable[[], Awaitable[int | None]] | None = None) -> WindowResult:
    """Send a window; `base_url` may be a CompletionClient (its transport, if any, is used). `sample`: the
    server's running requests now (None: it has no such count), read every SAMPLE_S while the window runs."""
    clock, client = _Clock(), base_url if isinstance(base_url, CompletionClient) else None
    sender: _Sender = _Httpx(client, clock) if client is not None and not client.direct else \
        _Pool(client.base_url if client else str(base_url), warm_path, timeout_s, clock)
    window = _Window(sender, clock, concurrency, duration_s, more)
    sampler = asyncio.create_task(_sample(sample, clock)) if sample else None
    try:
        await sender.prepare(requests, concurrency)
        await window.send(requests)
        if window.tasks:
            _, pending = await asyncio.wait(window.tasks, timeout=grace_s)
            sender.cut = f"cut: no whole answer within grace_s={grace_s:g} s of the window's stop"
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        pending_all: list[asyncio.Task[Any]] = [*window.tasks, *([sampler] if sampler else [])]
        for task in pending_all:
            task.cancel()  # a no-op on those done; the rest when the window itself is cancelled (Ctrl-C)
        sender.close()
    now = clock.now()
    timed = [t.result() if not t.cancelled() else Timed(None, b"", sender.cut, None, now, None, now)
             for t in window.tasks]
    running = await sampler if sampler is not None else []
    return WindowResult(window.unsent_merged(timed), running, window.start_ns, window.stop_ns)


async def _sample(sample: Callable[[], Awaitable[int | None]], clock: _Clock) -> list[tuple[int, int]]:
    """Samples until cancelled (returned then), or until the server shows no count (then none are taken)."""
    seen: list[tuple[int, int]] = []
    try:
        while (running := await sample()) is not None:
            seen.append((clock.now(), running))
            await asyncio.sleep(SAMPLE_S)
    except asyncio.CancelledError:
        pass
    return seen


class _Sender:
    cut = "cut"  # the error of an answer cut by the grace period

    async def prepare(self, requests: Sequence[Prepared], concurrency: int | None) -> None:  # bytes, connections
        pass

    def start(self, request: Prepared, scheduled_ns: int | None) -> asyncio.Task[Timed]:
        raise NotImplementedError

    def close(self) -> None:  # connections left open are closed
        pass


class _Window:
    """The schedule of one window: when each request is started, and which are never sent."""

    def __init__(self, sender: _Sender, clock: _Clock, concurrency: int | None, duration_s: float | None,
                 more: Callable[[int], Prepared] | None) -> None:
        self.sender, self.clock, self.more = sender, clock, more
        self.gate = asyncio.Semaphore(concurrency) if concurrency else None
        self.duration_ns = None if duration_s is None else int(duration_s * 1e9)
        self.tasks: list[asyncio.Task[Timed]] = []
        self.unsent: dict[int, Timed] = {}  # position -> why it was not sent
        self.start_ns = self.stop_ns = 0

    async def send(self, requests: Sequence[Prepared]) -> None:
        self.start_ns = self.clock.now() + LEAD_NS
        if requests and requests[0].offset_s is None:
            await self._closed_loop(requests)
        else:
            await self._paced(requests)
        self.stop_ns = self.clock.now()

    def _started(self, request: Prepared, scheduled_ns: int | None) -> None:
        task = self.sender.start(request, scheduled_ns)
        if self.gate is not None:
            task.add_done_callback(lambda _: self.gate.release() if self.gate else None)
        self.tasks.append(task)

    async def _paced(self, requests: Sequence[Prepared]) -> None:
        shift = 0  # slots waited for so far: the schedule after them moves, it does not catch up
        for position, request in enumerate(requests):
            target = self.start_ns + shift + int((request.offset_s or 0.0) * 1e9)
            if self._over(target):
                self._left(requests, position, target)
                return
            await self.clock.until(target)
            if self.gate is not None and self.gate.locked():
                await self.gate.acquire()
                shift += self.clock.now() - target  # the rest keep their gaps from this send
            elif self.gate is not None:
                await self.gate.acquire()
                if self._over(self.clock.now()):
                    self.gate.release()
                    self._left(requests, position, target)
                    return
            self._started(request, target)

    async def _closed_loop(self, requests: Sequence[Prepared]) -> None:
        assert self.gate is not None, "a closed loop needs a concurrency"
        seq = 0
        while seq < len(requests) or (self.duration_ns is not None and self.more is not None):
            await self.gate.acquire()
            now = self.clock.now()
            if self._over(now) and seq >= len(requests):
                self.gate.release()
                return
            self._started(requests[seq] if seq < len(requests) else self.more(seq), now)  # type: ignore[misc]
            seq += 1

    def _over(self, at_ns: int) -> bool:
        return self.duration_ns is not None and at_ns - self.start_ns >= self.duration_ns

    def _left(self, requests: Sequence[Prepared], position: int, scheduled_ns: int) -> None:
        now = self.clock.now()
        why = f"not sent: the window's duration_s={(self.duration_ns or 0) / 1e9:g} s ended before its turn"
        for i in range(position, len(requests)):
            self.unsent[i] = Timed(None, b"", why + (" (it waited for a concurrency slot)" if self.gate else ""),
                                   scheduled_ns if i == position else None, now, None, now, False,
                                   requests[i].streamed)

    def unsent_merged(self, timed: list[Timed]) -> list[Timed]:
        """The sent ones in order, then those never sent (their positions follow the last sent)."""
        return [*timed, *(self.unsent[i] for i in sorted(self.unsent))]


class _Httpx(_Sender):
    """Through the client's httpx (a transport standing in for the network): unstreamed."""

    def __init__(self, client: CompletionClient, clock: _Clock) -> None:
        self.client, self.clock = client, clock

    def start(self, request: Prepared, scheduled_ns: int | None) -> asyncio.Task[Timed]:
        async def one() -> Timed:
            send_ns = self.clock.now()
            try:
                exchange = await self.client.complete(request.body, request.path)
            except asyncio.CancelledError:
                return Timed(None, b"", self.cut, scheduled_ns, send_ns, None, self.clock.now())
            return Timed(exchange.status, exchange.body, exchange.error, scheduled_ns, send_ns,
                         self.clock.now() if exchange.status is not None else None, self.clock.now(),
                         exchange.sent)
        return asyncio.create_task(one())


class _Pool(_Sender):
    """Keep-alive connections, reused as answers end; requests' bytes made before the window."""

    def __init__(self, base_url: str, warm_path: str, timeout_s: float, clock: _Clock) -> None:
        url = urlsplit(base_url)
        self.host, self.port, self.authority = url.hostname or "127.0.0.1", url.port or 80, url.netloc
        self.warm_path, self.timeout_s, self.clock = warm_path, timeout_s, clock
        self.idle: list[release.Connection] = []
        self.opened = 0
        self.ceiling: int | None = None
        self.addresses: Sequence[release.Address] | str = ""
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
        if isinstance(self.addresses, str) or (self.ceiling is not None and self.opened >= self.ceiling):
            return
        self.opened += 1
        conn = await release.warm_connection(self.addresses, self.authority, self.warm_path, 10.0)
        if isinstance(conn, str):
            self.opened -= 1
            return
        self.all.append(conn)
        self.used[id(conn)] = self.clock.now()
        self.idle.append(conn)

    def start(self, request: Prepared, scheduled_ns: int | None) -> asyncio.Task[Timed]:
        payload, events = self._payload(request)
        conn = self._fresh()
        if conn is None:
            return asyncio.create_task(self._opening(request, payload, events, scheduled_ns))
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

    async def _opening(self, request: Prepared, payload: bytes, events: list[Any], scheduled_ns: int | None) -> Timed:
        """No idle connection: one opened on the spot (its send is as late as that takes)."""
        await self._open()
        if not self.idle:
            now = self.clock.now()
            reason = self.addresses if isinstance(self.addresses, str) else "ConnectError: no connection (not sent)"
            return Timed(None, b"", reason, scheduled_ns, now, None, now, False, request.streamed)
        conn = self.idle.pop()  # just opened
        unsent, send_ns, error = self._send(conn, payload)
        return await self._read(conn, request, events, unsent, scheduled_ns, send_ns, error)

    def _send(self, conn: release.Connection, payload: bytes) -> tuple[bytes, int, str | None]:
        try:
            unsent = payload[conn.sock.send(payload):]
        except BlockingIOError:
            unsent = payload
        except OSError as exc:
            return payload, self.clock.now(), f"WriteError: {type(exc).__name__}: {exc} (not sent)"
        return unsent, self.clock.now(), None

    async def _read(self, conn: release.Connection, request: Prepared, events: list[Any], unsent: bytes,
                    scheduled_ns: int | None, send_ns: int, error: str | None) -> Timed:
        timed = Timed(None, b"", error, scheduled_ns, send_ns, None, send_ns, error is None, request.streamed)
        if error is not None:
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
            timed.error = self.cut
        except TimeoutError:
            timed.error = f"ReadTimeout: no answer in {self.timeout_s:g} s"
        except (OSError, release.NoAnswer) as exc:
            timed.error = f"ReadError: {exc}".rstrip(": ")
        except h11.ProtocolError as exc:
            timed.error = f"RemoteProtocolError: {exc}"
        timed.recv_ns, timed.body = self.clock.now(), b"".join(chunks)
        if timed.error is None:
            if timed.status is not None and not 200 <= timed.status < 300:
                timed.error = f"HTTP {timed.status}"
            self._reuse(conn)
        else:
            timed.status = None if timed.error == self.cut or timed.status is None else timed.status
            self._drop(conn)
        return timed

    def _reuse(self, conn: release.Connection) -> None:
        if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            self.used[id(conn)] = self.clock.now()
            self.idle.append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: release.Connection) -> None:
        conn.sock.close()
        self.opened -= 1

    def close(self) -> None:
        for conn in self.all:
            conn.sock.close()
