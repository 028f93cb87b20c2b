"""Ctrl-C and SIGTERM for a verb: the first one stops it through the clean-up path (a KeyboardInterrupt);
more while it cleans up, and once it is done, are noted, not obeyed (the reaper removes what a kill -9
leaves). SIGINT is taken also when a shell started the process in the background with it ignored. asyncio is
imported where it is used: every verb imports this module, and `run` needs asyncio only once an engine answers."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

SIGNALS = (signal.SIGTERM, signal.SIGINT)
T = TypeVar("T")


def _noted(signum: int, frame: Any) -> None:
    os.write(2, b"cleaning up; kill -9 leaves it to the reaper\n")  # no print: it may interrupt a print


def _interrupt(signum: int, frame: Any) -> None:
    for other in SIGNALS:
        signal.signal(other, _noted)
    raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, _interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, where an interrupt cancels the main task (the event loop's own way out, as asyncio.run does
    for a default SIGINT) and is then raised as KeyboardInterrupt. Raised inside the loop at an arbitrary point,
    it can land in a library's cancel scope (httpx's anyio) and surface as that library's RuntimeError."""
    import asyncio

    interrupted = False

    async def guarded() -> T:
        nonlocal interrupted
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        ours = threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is _interrupt  # inside interruptible(): ours to take over

        def cancel(signum: int, frame: Any) -> None:
            nonlocal interrupted
            interrupted = True
            for other in SIGNALS:
                signal.signal(other, _noted)
            if task is not None:
                loop.call_soon_threadsafe(task.cancel)

        for signum in SIGNALS if ours else ():
            signal.signal(signum, cancel)
        try:
            return await main
        finally:
            for signum in SIGNALS if ours and not interrupted else ():
                signal.signal(signum, _interrupt)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    if interrupted:  # it came as the task ended: obeyed all the same
        raise KeyboardInterrupt
    return result


@contextlib.contextmanager
def noted_after() -> Iterator[None]:
    """The body may be interrupted; what follows it (printing the outcome) may not."""
    try:
        yield
    finally:
        for signum in SIGNALS:
            signal.signal(signum, _noted)
