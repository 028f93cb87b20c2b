"""The load generator's clock (run/load/generator.py): wall-clock ns through one monotonic-to-wall offset per window,
and a wait until a time that barely spins and does not let the loop's ms-grained timers make a send late.

The wait sleeps on a Linux timerfd armed at an absolute time (CLOCK_MONOTONIC, the clock of perf_counter),
read by the event loop like a socket, so answers keep being read meanwhile (AIPerf's services wait on one too).
It is armed 100 us before the target, past the kernel's timer slack (~50 us), and the rest is yielded through:
at most a tenth of a core at 1000 sends/s. Without a timerfd (not Linux) it sleeps on the loop's timers
(ms-grained) to about 1 ms before and yields through the rest."""

from __future__ import annotations

import asyncio
import ctypes
import os
import time

SPIN_NS = 1_000_000  # without a timerfd: the last stretch before a send is yielded through, not slept
TIMERFD_SPIN_NS = 100_000  # with one: woken this long before (past the kernel's ~50 us slack), then yielded
_CLOCK_MONOTONIC, _TFD_TIMER_ABSTIME = 1, 1
_TFD_FLAGS = os.O_NONBLOCK | os.O_CLOEXEC  # TFD_NONBLOCK, TFD_CLOEXEC share these values on Linux


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create, libc.timerfd_settime  # noqa: B018 - absent outside Linux
    except (OSError, AttributeError):
        return None
    return libc


class Clock:
    def __init__(self) -> None:
        self.offset_ns = time.time_ns() - time.perf_counter_ns()  # taken once: wall times stay monotonic
        self._libc = _libc()
        self._fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_FLAGS) if self._libc else -1

    def now(self) -> int:
        return time.perf_counter_ns() + self.offset_ns

    async def until(self, target_ns: int) -> None:
        """Return at `target_ns` (wall ns) or just after; already past it, yield once to the loop (answers that
        arrived meanwhile are read before a late request goes)."""
        if target_ns <= self.now():
            await asyncio.sleep(0)
            return
        spin_ns = SPIN_NS if self._fd < 0 else TIMERFD_SPIN_NS
        if self._fd >= 0 and target_ns - self.now() > spin_ns:
            await self._timerfd(target_ns - spin_ns - self.offset_ns)
        while (left := target_ns - self.now()) > 0:
            await asyncio.sleep((left - spin_ns) / 1e9 if left > 2 * spin_ns else 0)

    async def _timerfd(self, at_perf_ns: int) -> None:
        assert self._libc is not None
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(at_perf_ns // 1_000_000_000, at_perf_ns % 1_000_000_000))
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        loop = asyncio.get_running_loop()
        fired: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._fd, _fired, self._fd, fired)
        try:
            await fired
        finally:
            loop.remove_reader(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _fired(fd: int, fired: asyncio.Future[None]) -> None:
    try:
        os.read(fd, 8)  # the expiration count: read, so the fd is not readable again
    except BlockingIOError:
        return
    if not fired.done():
        fired.set_result(None)
