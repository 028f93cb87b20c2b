"""Ctrl-C and SIGTERM for a verb: the first one stops it through the clean-up path (a KeyboardInterrupt);
more while it cleans up, and once it is done, are noted, not obeyed (the reaper removes what a kill -9
leaves). SIGINT is taken also when a shell started the process in the background with it ignored."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


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


@contextlib.contextmanager
def noted_after() -> Iterator[None]:
    """The body may be interrupted; what follows it (printing the outcome) may not."""
    try:
        yield
    finally:
        for signum in SIGNALS:
            signal.signal(signum, _noted)
