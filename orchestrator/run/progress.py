"""Progress of a long study: one bar per arm and phase (requests done / total, elapsed, ETA, failures) on
stderr when it is a terminal (rich); otherwise one plain line as each phase ends, so logs and CI stay
readable. Fed by the responses writer: every request has exactly one row, so rows are progress."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PhaseCount:
    total: int  # requests the phase will send (less those a rule leaves unsent)
    done: int = 0
    failed: int = 0
    unsent: dict[str, int] = field(default_factory=dict)  # why -> requests a rule left unsent


STOPPED = "stop_after_divergences"


class Progress:
    def __init__(self, say: Callable[[str], None], live: bool | None = None) -> None:
        self.say = say
        self.live = sys.stderr.isatty() if live is None else live
        self._bars: Any = None
        self._tasks: dict[tuple[str, str], Any] = {}
        self._counts: dict[tuple[str, str], PhaseCount] = {}
        self._started: dict[tuple[str, str], float] = {}

    def __enter__(self) -> Progress:
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bars

            self._bars = Bars(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                              TextColumn("{task.fields[failed]} failed"), console=Console(stderr=True))
            self._bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bars is not None:
            self._bars.stop()

    def arm(self, arm: str, totals: dict[str, int]) -> None:
        """Announce an arm's phases and how many requests each sends."""
        for phase, total in totals.items():
            key = (arm, phase)
            self._counts[key] = PhaseCount(total)
            if self._bars is not None:
                self._tasks[key] = self._bars.add_task(f"{arm} {phase}", total=total, failed=0, start=False)

    def row(self, row: dict[str, Any]) -> None:
        """One response row written (successful or not)."""
        key = (row["arm"], row["phase"])
        counts = self._counts.get(key)
        if counts is None:
            return
        if counts.done == 0:
            self._started[key] = time.monotonic()
            if self._bars is not None:
                self._bars.start_task(self._tasks[key])
        counts.done += 1
        counts.failed += row.get("error") is not None
        self._update(key)

    def ended(self, arm: str, phase: str, requests: int, why: str = STOPPED) -> None:
        """Requests of a phase a rule leaves unsent (`why`, the setting that did): out of its total."""
        key = (arm, phase)
        counts = self._counts.get(key)
        if counts is None:
            return
        counts.total -= requests
        counts.unsent[why] = counts.unsent.get(why, 0) + requests
        if self._bars is not None:
            self._bars.update(self._tasks[key], total=counts.total)
        self._update(key)

    def _update(self, key: tuple[str, str]) -> None:
        counts = self._counts[key]
        if self._bars is not None:
            self._bars.update(self._tasks[key], completed=counts.done, failed=counts.failed)
        elif counts.done == counts.total and key in self._started:
            elapsed = time.monotonic() - self._started.pop(key)
            unsent = "".join(f", {n} not sent ({why})" for why, n in counts.unsent.items())
            self.say(f"[{key[0]}] {key[1]}: {counts.done}/{counts.total} requests, {counts.failed} failed{unsent}, "
                     f"{elapsed:.1f} s")
