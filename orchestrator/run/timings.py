"""Where a run's time goes, stage by stage (run.json `timings_s`; the report shows it in one line), so a user
sees what the orchestrator adds to what the engine costs. docs/benchmarks.md measures it against a
hand-written baseline (bench/study_overhead.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class StageTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()  # an early start (runtime.overlap_arm_starts) times from its own thread

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the body; a stage entered again (one per arm) adds up."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        return {name: round(seconds, 3) for name, seconds in self.seconds.items()}
