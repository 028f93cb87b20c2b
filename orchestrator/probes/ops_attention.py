"""Attention probes: decode (one query token per sequence over a KV cache of `context` tokens, M sequences)
and causal prefill (M sequences of `length` tokens). Arms: torch SDPA under each backend
(torch.nn.attention.sdpa_kernel), SDPA as torch picks it, and where the image has them flash_attn's and
flashinfer's split-KV decode kernels (imported on use; absent is a cell marked unsupported, never emulated).
Row 0 is sequence 0: its output must not depend on how many other sequences share the call."""

from __future__ import annotations

from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind, Unsupported, dtype_of

SDPA_BACKENDS = {"sdpa_math": "MATH", "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_flash": "FLASH_ATTENTION",
                 "sdpa_cudnn": "CUDNN_ATTENTION"}
DECODE_ARMS = ("sdpa_default", *SDPA_BACKENDS, "eager", "flash_attn", "flashinfer")
PREFILL_ARMS = ("sdpa_default", *SDPA_BACKENDS, "eager", "flash_attn")


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device,
             query_len: int) -> dict[str, torch.Tensor]:
    heads, kv_heads, dim = int(params["heads"]), int(params["kv_heads"]), int(params["head_dim"])
    ctx, dtype = int(params["context"]), dtype_of(params)
    return {"q": torch.randn(m_max, heads, query_len, dim, generator=gen).to(device, dtype),
            "k": torch.randn(m_max, kv_heads, ctx, dim, generator=gen).to(device, dtype),
            "v": torch.randn(m_max, kv_heads, ctx, dim, generator=gen).to(device, dtype)}


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arm: str, causal: bool) -> Call:
    """SDPA under one backend; grouped KV heads are expanded to the query heads (what every backend takes)."""
    import torch.nn.functional as F

    if k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    if arm == "sdpa_default":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:
        raise Unsupported(f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel: {exc}") from exc
    backend = getattr(SDPBackend, SDPA_BACKENDS[arm])

    def call() -> torch.Tensor:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return call


def _eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Call:
    """Attention as a model's eager code computes it (what `locate` names between v_proj and o_proj): q k^T
    scaled, the causal mask added, softmax in fp32 cast back, times v."""
    if k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    scale = q.shape[-1] ** -0.5
    mask = torch.full((q.shape[2], k.shape[2]), float("-inf"), device=q.device).triu(1).to(q.dtype) if causal \
        else None

    def call() -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(2, 3)) * scale
        if mask is not None:
            scores = scores + mask
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)
    return call


def _import(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or a build that does not load on this device
        raise Unsupported(f"{name} is not importable in this image: {type(exc).__name__}: {exc}") from exc


def _flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Call:
    """flash_attn: decode through flash_attn_with_kvcache (num_splits=0: its heuristic picks the split-KV
    count from batch and context), prefill through flash_attn_func. Layout [batch, seq, heads, dim]."""
    flash = _import("flash_attn")
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    if causal:
        return lambda: flash.flash_attn_func(qs, ks, vs, causal=True)
    seqlens = torch.full((q.shape[0],), k.shape[2], dtype=torch.int32, device=q.device)
    return lambda: flash.flash_attn_with_kvcache(qs, ks, vs, cache_seqlens=seqlens, num_splits=0)


def _flashinfer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, page_size: int = 16) -> Call:
    """flashinfer's batch decode over a paged KV cache (NHD), every sequence `context` tokens long."""
    flashinfer = _import("flashinfer")
    m, kv_heads, ctx, dim = k.shape
    if ctx % page_size:
        raise Unsupported(f"context {ctx} is not a multiple of the page size {page_size}")
    pages = ctx // page_size
    cache = torch.stack([t.transpose(1, 2).reshape(m * pages, page_size, kv_heads, dim) for t in (k, v)], dim=1)
    workspace = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    indptr = torch.arange(m + 1, dtype=torch.int32, device=q.device) * pages
    indices = torch.arange(m * pages, dtype=torch.int32, device=q.device)
    last = torch.full((m,), page_size, dtype=torch.int32, device=q.device)
    wrapper.plan(indptr, indices, last, q.shape[1], kv_heads, dim, page_size, q_data_type=q.dtype,
                 kv_data_type=k.dtype)
    qs = q[:, :, 0].contiguous()
    return lambda: wrapper.run(qs, cache)


def _bind(inputs: dict[str, torch.Tensor], arm: str, m: int, causal: bool) -> Call:
    q, k, v = (inputs[n][:m] for n in ("q", "k", "v"))
    if q.device.type != "cuda" and arm in ("flash_attn", "flashinfer"):
        raise Unsupported(f"{arm} runs on CUDA only; this cell ran on {q.device}")
    if arm == "flash_attn":
        return _flash_attn(q, k, v, causal)
    if arm == "flashinfer":
        return _flashinfer(q, k, v)
    if arm == "eager":
        return _eager(q, k, v, causal)
    return _sdpa(q, k, v, arm, causal)


def _dims(params: dict[str, Any]) -> tuple[int, int, int | None]:
    return int(params["heads"]), int(params["head_dim"]), int(params["context"])


DEFAULTS = {"heads": 8, "kv_heads": 8, "head_dim": 128, "context": 1024, "dtype": "bf16"}
OPS = {
    # N = query heads, K = head dim, context = KV tokens per sequence (decode) or prompt length (prefill)
    "decode_attention": OpKind(DECODE_ARMS, DEFAULTS, lambda p, m, g, d: _prepare(p, m, g, d, 1),
                               lambda s, arm, m, p: _bind(s, arm, m, causal=False), _dims),
    "prefill_attention": OpKind(PREFILL_ARMS, DEFAULTS,
                                lambda p, m, g, d: {**_prepare(p, m, g, d, int(p["context"]))},
                                lambda s, arm, m, p: _bind(s, arm, m, causal=True), _dims),
}
