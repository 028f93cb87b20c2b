"""FlashInfer-style autotune cache for the MoE expert kernel.

The cache key hashes what the tuned config depends on. The *requested* backend is part of it, so
``--moe-backend flashinfer_cutlass`` and ``auto`` (which resolves to the same kernel) get different
keys, as in the seed. With ``legacy_key`` the finalize mode is left out of the key, although the
stored entry still carries it and the kernel honours the entry: the collision the seed reports.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from refengine import __version__, kernels

logger = logging.getLogger(__name__)


def tuned_tile(backend: str) -> dict[str, int]:
    """The tile the (deterministic) tuner settles on: differs from the default tile."""
    return {"k_chunk": 16 if backend == "triton" else 64}


def cache_key(requested: str, resolved: str, finalize: str, device: str, legacy: bool) -> str:
    fields = {"requested_backend": requested, "backend": resolved, "engine_version": __version__, "device": device}
    if not legacy:
        fields["finalize"] = finalize
    blob = json.dumps(fields, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class TuneEntry:
    tile: dict[str, int]
    finalize: str  # "fused" | "unfused": the mode the entry was tuned under


class Autotuner:
    """Holds the tile in use; tunes once after the first batch when the cache missed."""

    def __init__(
        self, cache_dir: str | None, requested: str, resolved: str, fused: bool, device: str, legacy: bool
    ) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.resolved = resolved
        self.finalize = "fused" if fused else "unfused"
        self.legacy = legacy
        self.key = cache_key(requested, resolved, self.finalize, device, legacy)
        self.entry: TuneEntry | None = None
        self.pending = False
        self._lock = threading.Lock()
        if self.cache_dir is None:
            return
        path = self.path
        if path.exists():
            data = json.loads(path.read_text())
            self.entry = TuneEntry(tile=dict(data["tile"]), finalize=str(data["finalize"]))
        else:
            self.pending = True

    @property
    def path(self) -> Path:
        assert self.cache_dir is not None
        return self.cache_dir / f"{self.key}.json"

    def log_startup(self) -> None:
        if self.cache_dir is None:
            logger.info("Autotune disabled (no cache dir)")
            return
        logger.info("Autotune cache key: %s (legacy key: %s)", self.key, "yes" if self.legacy else "no")
        if self.entry is not None:
            logger.info("Using FlashInfer autotune cache file: %s.", self.path)
            logger.info("Loaded autotune entry tuned for finalize=%s", self.entry.finalize)
        else:
            logger.info("Autotune cache miss: will tune on first request")

    def kernel_choice(self) -> tuple[int, bool]:
        """(k_chunk, fused_finalize) for the next batch. A loaded entry's finalize mode wins."""
        with self._lock:
            if self.entry is not None:
                return self.entry.tile["k_chunk"], self.entry.finalize == "fused"
            return kernels.DEFAULT_TILE["k_chunk"], self.finalize == "fused"

    def after_batch(self) -> None:
        """Tune after the first (cold) batch and persist the entry atomically."""
        with self._lock:
            if not self.pending or self.cache_dir is None:
                return
            self.pending = False
            entry = TuneEntry(tile=tuned_tile(self.resolved), finalize=self.finalize)
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            payload = {"key": self.key, "backend": self.resolved, "tile": entry.tile, "finalize": entry.finalize,
                       "engine_version": __version__}
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".tune-", suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(payload, fh, sort_keys=True)
            os.replace(tmp, self.path)
            self.entry = entry
            logger.info("Autotuned MoE tile %s; saved to %s", entry.tile, self.path)
