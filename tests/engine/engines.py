"""Engines without HTTP, for the tests that need torch (imported by them, not by conftest, so that
collecting the engine's torch-free tests does not import torch)."""

from __future__ import annotations

import functools

import torch
from refengine.autotune import Autotuner
from refengine.config import EngineConfig
from refengine.engine import Engine, GenRequest, GenResult
from refengine.model import TinyMoE

TEXT = (
    "In the beginning the reference engine served bytes, and the orchestrator compared them. "
    "Identical requests at temperature zero should give identical logprobs unless a switch says otherwise. "
)


def prompt_ids(n: int, salt: int = 0) -> list[int]:
    data = (TEXT * (n // len(TEXT) + 2)).encode()
    return list(data[salt : salt + n])


@functools.lru_cache(maxsize=4)
def model_for(seed: int, max_model_len: int) -> TinyMoE:
    # The model holds no per-request state (KV caches are per sequence), so sharing it is safe.
    return TinyMoE(seed, max_model_len, torch.device("cpu"), torch.float32)


def make_engine(**kw: object) -> Engine:
    kw.setdefault("max_model_len", 1024)
    cfg = EngineConfig(**kw)  # type: ignore[arg-type]
    tuner = Autotuner(
        cfg.autotune_cache_dir, cfg.moe_backend, cfg.resolved_backend, cfg.fused_finalize, "cpu",
        cfg.autotune_legacy_key,
    )
    return Engine(cfg, model_for(cfg.seed, cfg.max_model_len), tuner)


def greedy(ids: list[int], max_tokens: int = 4, logprobs: int = 20, **kw: object) -> GenRequest:
    return GenRequest(prompt_ids=ids, max_tokens=max_tokens, temperature=0.0, logprobs=logprobs, **kw)  # type: ignore[arg-type]


def signature(res: GenResult) -> tuple:
    """The seed's probe signature: output ids plus top-logprob values at 12 significant digits."""
    return (tuple(res.output_ids), tuple(tuple(f"{v:.12g}" for _, v in p.top) for p in res.logprobs))


def distinct(engine: Engine, req: GenRequest, n: int = 6) -> int:
    return len({signature(engine.run_batch([req])[0]) for _ in range(n)})
