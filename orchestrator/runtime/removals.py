"""Removals of containers asked of a Docker daemon on this machine and not waited for (docker.py `remove`): the
daemon's teardown of an arm's container (die to destroy, about 0.12 s) overlaps what comes next, the next arm's
start or the report. A later start of the same name, and `cleanup`, wait for them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable


class Removals:
    def __init__(self) -> None:
        self._threads: dict[str, threading.Thread] = {}  # container name -> its removal
        self._lock = threading.Lock()

    def ask(self, name: str, remove: Callable[[], None]) -> None:
        thread = threading.Thread(target=_quietly, args=(remove,), name=f"remove-{name}", daemon=True)
        with self._lock:
            self._threads[name] = thread
        thread.start()

    def wait(self, name: str | None = None) -> None:
        """Until the removals asked so far, or that of the container `name`, have ended."""
        with self._lock:
            names = list(self._threads) if name is None else [name] if name in self._threads else []
            threads = [self._threads.pop(n) for n in names]
        for thread in threads:
            thread.join()


def _quietly(remove: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # `cleanup` removes it again by its labels, and says why it cannot
        remove()
