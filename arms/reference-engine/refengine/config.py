"""Resolved engine configuration shared by the model, scheduler and server."""

from __future__ import annotations

from dataclasses import dataclass

MOE_BACKENDS = ("auto", "triton", "cutlass", "flashinfer_cutlass")
# What "auto" resolves to; a pin to the same name yields the same kernel but another cache key.
AUTO_BACKEND = "flashinfer_cutlass"
BATCH_WINDOW_MS = 20.0
DETERMINISTIC_BATCH_WINDOW_MS = 50.0  # what --deterministic sets where --batch-window-ms is not given


def resolve_backend(requested: str) -> str:
    return AUTO_BACKEND if requested == "auto" else requested


@dataclass
class EngineConfig:
    model: str = "refengine/tiny-moe"
    served_model_name: str | None = None
    max_model_len: int = 8192
    max_num_seqs: int = 16
    max_logprobs: int = 20
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"  # auto | float32 | bfloat16
    fused_finalize: bool = False
    batch_invariant: bool = True
    indexer_budget: int = 2048
    topk_tiebreak: str = "stable"  # stable | random: the indexer's top-k and, with ties there, the router's
    router_tie_share: float = 0.0  # the share of router rows with an exact tie at the k-th expert (0: none)
    moe_backend: str = "auto"
    autotune_cache_dir: str | None = None
    autotune_legacy_key: bool = False
    batch_window_ms: float = BATCH_WINDOW_MS
    # --deterministic: batch invariance on and, as a second change nobody asked for, the batch window widened to
    # DETERMINISTIC_BATCH_WINDOW_MS (cli.py): the side-effect audit's planted case (docs/guard.md)
    deterministic: bool = False
    step_delay_ms: float = 0.0  # a planted cost: every engine step (a prefill, a decode) sleeps this much more
    # A planted warm-up: every step of a batch begun before this many requests were served sleeps
    # warmup_delay_ms more (a server that is slow at first, as a JIT-compiling or cache-filling one is)
    warmup_slow_requests: int = 0
    warmup_delay_ms: float = 0.0
    # A planted decode-only defect: the decode steps' lm_head reduces in split-K partials rounded to bfloat16
    # (model.py `decode_logits`), the prefill's does not, so re-scoring an answer as a prompt disagrees with it
    decode_defect: bool = False
    # A simulated CUDA-graph capture of the decode step (graphs.py), with the seed's stale-step defect: each
    # replay reads its input buffer before the step's copy lands; graph_sync_fix: the replay waits for it
    cuda_graphs: bool = False
    graph_sync_fix: bool = False
    # A prefix cache (refengine/prefix_cache.py): a prompt's kept block-aligned prefix is not prefilled again,
    # and the rest of it runs another path, whose last bits differ from a cold prefill's
    prefix_cache: bool = False

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model

    @property
    def resolved_backend(self) -> str:
        return resolve_backend(self.moe_backend)
