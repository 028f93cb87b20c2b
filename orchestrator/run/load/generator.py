"""Sending one window of a load point (docs/load.md): each request at its scheduled time, answers read as they
arrive, and every request's timings kept raw (rows are made after the window, run/send/sender.py).

The entry point, for the protocol and for benchmarks alike:

    result = await run_window(base_url, [Prepared(path, body, offset_s), ...], concurrency=16, grace_s=30)

`offset_s` is when the request is meant to leave, from the window's start (all None: a closed loop of
`concurrency`, each answer starting the next; `more(seq)` makes requests past the list while a `duration_s`
lasts). With a rate and a concurrency it sleeps, then waits for a slot (AIPerf's sleep-then-gate): a slot
waited for shifts the rest of the schedule by that wait, never caught up. `result.timed[i]` is the i-th
request's Timed (every request has one, also those cut by the grace period or left unsent by the duration).

Pacing: run/load/clock.py waits until each send's time on a timerfd (no spinning); a request already late
yields to the loop once first, so a late burst still reads answers between its sends. Keep-alive HTTP/1.1
connections (h11, warmed as run/wire/release.py warms a batch's), bytes made before the window, one `socket.send`
each; a spare connection is opened whenever the last idle one is taken, up to the concurrency, and a request
with none idle takes the first connection freed or opened, in turn. The garbage collector is frozen and off
during a window (a full collection is a pause of tens of ms). A client with a transport (tests) sends through
httpx, unstreamed. docs/load.md has the measured limits.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.record.failures import ErrorKind
from orchestrator.run.load.clock import Clock
from orchestrator.run.load.pool import Pool, Sender
from orchestrator.run.load.pool import Prepared as Prepared
from orchestrator.run.load.pool import Timed as Timed
from orchestrator.run.wire.client import CompletionClient

LEAD_NS = 20_000_000  # the window starts this long after its connections are warm
SAMPLE_S = 0.1  # running requests on the metrics endpoint, sampled this often during a window


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


async def run_window(base_url: str | CompletionClient, requests: Sequence[Prepared], *, concurrency: int | None = None,
                     duration_s: float | None = None, grace_s: float = 30.0, timeout_s: float = 300.0,
                     warm_path: str = "/health", more: Callable[[int], Prepared] | None = None,
                     sample: Callable[[], Awaitable[int | None]] | None = None) -> WindowResult:
    """Send a window; `base_url` may be a CompletionClient (its transport, if any, is used). `sample`: the
    server's running requests now (None: it has no such count), read every SAMPLE_S while the window runs."""
    clock, client = Clock(), base_url if isinstance(base_url, CompletionClient) else None
    sender: Sender = _Httpx(client, clock) if client is not None and not client.direct else \
        Pool(client.base_url if client else str(base_url), warm_path, timeout_s, clock)
    window = _Window(sender, clock, concurrency, duration_s, more)
    sampler = asyncio.create_task(_sample(sample, clock)) if sample else None
    collecting = gc.isenabled()
    gc.freeze()  # what is alive now is never scanned, and nothing is collected until the window is over
    gc.disable()
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
        clock.close()
        gc.unfreeze()
        if collecting:
            gc.enable()
    now = clock.now()
    timed = [t.result() if not t.cancelled()
             else Timed(None, b"", sender.cut, None, now, None, now, error_kind=ErrorKind.CUT) for t in window.tasks]
    running = await sampler if sampler is not None else []
    return WindowResult(window.unsent_merged(timed), running, window.start_ns, window.stop_ns)


async def _sample(sample: Callable[[], Awaitable[int | None]], clock: Clock) -> list[tuple[int, int]]:
    """Samples until cancelled (returned then), or until the server shows no count (then none are taken)."""
    seen: list[tuple[int, int]] = []
    try:
        while (running := await sample()) is not None:
            seen.append((clock.now(), running))
            await asyncio.sleep(SAMPLE_S)
    except asyncio.CancelledError:
        pass
    return seen


class _Window:
    """The schedule of one window: when each request is started, and which are never sent."""

    def __init__(self, sender: Sender, clock: Clock, concurrency: int | None, duration_s: float | None,
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
                                   requests[i].streamed, error_kind=ErrorKind.CUT)

    def unsent_merged(self, timed: list[Timed]) -> list[Timed]:
        """The sent ones in order, then those never sent (their positions follow the last sent)."""
        return [*timed, *(self.unsent[i] for i in sorted(self.unsent))]


class _Httpx(Sender):
    """Through the client's httpx (a transport standing in for the network): unstreamed."""

    def __init__(self, client: CompletionClient, clock: Clock) -> None:
        self.client, self.clock = client, clock

    def start(self, request: Prepared, scheduled_ns: int | None) -> asyncio.Task[Timed]:
        async def one() -> Timed:
            send_ns = self.clock.now()
            try:
                exchange = await self.client.complete(request.body, request.path)
            except asyncio.CancelledError:
                return Timed(None, b"", self.cut, scheduled_ns, send_ns, None, self.clock.now(),
                             error_kind=ErrorKind.CUT)
            return Timed(exchange.status, exchange.body, exchange.error, scheduled_ns, send_ns,
                         self.clock.now() if exchange.status is not None else None, self.clock.now(),
                         exchange.sent, error_kind=exchange.error_kind)
        return asyncio.create_task(one())
