"""Memory peaks while an arm runs: a sampler thread per arm's engine, started once its container or process is
up and stopped before it is stopped, reading the runtime's memory of it and of its GPUs every `interval_s`. The
peaks are the highest readings (a sampled peak misses a spike shorter than the interval, unless the source keeps
its own peak: a cgroup's); what cannot be read is null, with why in the note."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.runtime.spec import Handle, MemoryReading, Runtime

INTERVAL_S = 0.5
JOIN_S = 30.0  # a reading in flight (the Docker stats API takes about a second; nvidia-smi has its own timeout)


@dataclass
class _Peak:
    """The highest reading of one source, or the first reason it could not be read."""

    what: str
    bytes: int | None = None
    source: str = ""
    reason: str | None = None

    def take(self, read: Callable[[], MemoryReading]) -> None:
        try:
            reading = read()
        except Exception as exc:  # informative only: a failed reading must never fail the arm
            lines = str(exc).splitlines()
            self.reason = self.reason or (lines[0] if lines else type(exc).__name__)
            return
        self.bytes, self.source = max(self.bytes or 0, reading.bytes), reading.source

    def note(self) -> str:
        if self.bytes is not None:
            return f"{self.what}: {self.source}"
        return f"{self.what}: not observable ({self.reason or 'no reading'})"


@dataclass(frozen=True)
class MemoryPeaks:
    peak_memory_bytes: int | None
    peak_gpu_memory_bytes: int | None
    memory_note: str

    def row(self) -> dict[str, Any]:
        """The `arms` row's columns."""
        return {"peak_memory_bytes": self.peak_memory_bytes, "peak_gpu_memory_bytes": self.peak_gpu_memory_bytes,
                "memory_note": self.memory_note}


class MemorySampler:
    def __init__(self, runtime: Runtime, handle: Handle, gpus: str | None, interval_s: float = INTERVAL_S) -> None:
        """`gpus`: the arm's ('all' or ids, as its spec has them); None: it has none, and none is read."""
        self.runtime, self.handle, self.gpus, self.interval_s = runtime, handle, gpus, interval_s
        self._memory = _Peak("memory")
        self._gpu = _Peak("GPU memory")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"memory-{handle.name}")

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        self._sample()
        while not self._stop.wait(self.interval_s):
            self._sample()
        self._sample()  # asked to stop: the last reading, the engine still running

    def _sample(self) -> None:
        self._memory.take(lambda: self.runtime.memory(self.handle))
        if self.gpus is not None:
            gpus = self.gpus
            self._gpu.take(lambda: self.runtime.gpu_memory(gpus))

    def stop(self) -> MemoryPeaks:
        """Stop sampling (while the engine still runs: its last reading is taken first) and give the peaks."""
        self._stop.set()
        self._thread.join(JOIN_S)
        gpu = self._gpu.note() if self.gpus is not None else "GPU memory: none, the arm has no GPUs"
        return MemoryPeaks(self._memory.bytes, self._gpu.bytes, f"{self._memory.note()}, every {self.interval_s:g} s; "
                           f"{gpu}")
