"""An arm's stop behind the next arm's start (`runtime.stop_behind_next_start`, on by default): once an arm's
last answer is in, its engine is stopped (SIGTERM, its exit), its logs read, its container removed and its
`arms` row written in a thread of their own, while the next arm's container is created and loads. The next arm
sends nothing, not even its cold request, until that stop has ended, so no two engines ever serve at once.

Only between Docker arms that share nothing (guard/overlap.py: a GPU, a cache, a scratch share, a host port):
a GPU still held could starve the next engine's memory check, and a cache still being written could be read
half done. A process arm sees every GPU unless it names some, so process arms stop first, as before."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all

from orchestrator.config.schema import Config
from orchestrator.guard.overlap import shared
from orchestrator.runtime.traits import traits_of


def may_stop_behind(config: Config, arm: str, upcoming: str | None) -> bool:
    """Whether `arm`'s stop may run while `upcoming` starts."""
    return (upcoming is not None and config.runtime.stop_behind_next_start
            and traits_of(config.runtime.kind).isolates_filesystem and not shared(config, arm, upcoming))


class StopsBehind:
    """At most one stop in flight. Its failure is kept, not raised where the next arm runs (it is not that
    arm's), and raised by `raise_failure` where the arms loop is."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stop-behind")
        self._pending: Future[None] | None = None
        self._failures: list[BaseException] = []

    def submit(self, stop: Callable[[], None]) -> None:
        self.wait()
        self._pending = self._pool.submit(stop)

    def wait(self) -> None:
        """Until the stop in flight has ended: before the next arm's first request."""
        pending, self._pending = self._pending, None
        if pending is not None:
            wait_all([pending])
            if (failure := pending.exception()) is not None:
                self._failures.append(failure)

    def raise_failure(self) -> None:
        self.wait()
        if self._failures:
            raise self._failures[0]

    def close(self) -> None:
        """Every stop ended (an interrupted run's last row lands too), the thread gone."""
        self.wait()
        self._pool.shutdown(wait=True)
