"""Batch-invariant kernels (--invariant-kernels): a row's result does not depend on how many rows are computed with
it, nor on the left padding a static batch gives it, so a request in a batch of 16 gets the bits it gets alone.

The method of the published batch-invariant ops (Thinking Machines' batch_invariant_ops, vLLM's
batch_invariant.py): every reduction a row goes through is computed in an order fixed by that row alone. Ours, in
torch, on any device (registered over the aten kernels with torch.library while the mode is on):
- matmul (aten::mm, addmm): each row is its own [1, K] x [K, N] library call, from a buffer whose rows all have
  the same alignment; a library picks its kernel (split-K, tiles) by the shapes it is given, and these are the
  same for a row whatever the batch, so the row's reduction over K is too (cuBLAS and oneDNN/MKL give the same
  bits for the same call on the same machine). The cost: no row shares a weight read with another.
- aten::bmm (a Linear on an input torch.matmul cannot flatten, the rotary embedding): each item by `mm`.
- mean (RMSNorm's), softmax and log_softmax: `tree_sum`, a binary tree of elementwise adds over the row (max is
  exact in any order).
- attention (`attention`, registered with Transformers as the model's attention): scores, softmax and the
  weighted sum of values as fp32 products and `tree_sum`s, each query over its own sequence's keys; the tree is
  aligned on the right, where a left-padded row's keys end, so the masked pad keys on its left add exact zeros.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

ALIGN_BYTES = 256  # every row of the matmul's buffers starts at this alignment (cuBLAS and MKL pick kernels by it)
CHUNK_BYTES = 1 << 28  # the most a chunk of the attention's fp32 products holds at once
ATTENTION = "invariant"  # the name the attention is registered under with Transformers
OPS = ("mm", "addmm", "bmm", "mean.dim", "_softmax", "_log_softmax")


def _acc(dtype: torch.dtype) -> torch.dtype:
    """The dtype a reduction runs in: fp32, or fp64 for fp64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum over the last dim as a binary tree of pairwise adds, the row padded with zeros on the left to a
    power of two. Each add is elementwise, so a row's sum is the same whatever else is in the tensor; and a row
    that is another row with more zeros on its left sums the same (its last 2^k elements form one subtree, the
    rest adds zero), which is what left padding gives. The final +0.0 turns a -0.0 (zeros of either sign) into
    +0.0."""
    n = x.shape[-1]
    if n == 0:
        return x.new_zeros(x.shape[:-1])
    width = 1 << (n - 1).bit_length()
    if width != n:
        x = F.pad(x, (width - n, 0))
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x.squeeze(-1) + 0.0


def _padded(n: int, dtype: torch.dtype) -> int:
    per = max(1, ALIGN_BYTES // torch.empty((), dtype=dtype).element_size())
    return -(-n // per) * per


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] @ b [K, N], each row alone: torch.mm(out=) is aten::mm.out, the library's own kernel."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return a.new_zeros((m, n))
    rows = a.new_empty((m, _padded(k, a.dtype)))
    rows[:, :k].copy_(a)
    out = a.new_empty((m, _padded(n, a.dtype)))
    for row, dest in zip(rows[:, None, :k].unbind(0), out[:, None, :n].unbind(0), strict=True):  # [1, K], [1, N]
        torch.mm(row, b, out=dest)
    return out[:, :n].contiguous()


def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1
          ) -> torch.Tensor:
    """beta * bias + alpha * (a @ b), the product by `mm`, the rest elementwise."""
    out = mm(a, b)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out
    return out + (bias if beta == 1 else bias * beta)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [B, M, K] @ b [B, K, N], each item by `mm` (torch.matmul takes this path for a Linear on a 3-D input it
    cannot flatten: a row gets the same bits either way)."""
    out = a.new_empty((a.shape[0], a.shape[1], b.shape[2]))
    for i in range(a.shape[0]):
        out[i] = mm(a[i], b[i])
    return out


def mean_dim(x: torch.Tensor, dim: list[int] | None, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> torch.Tensor:
    """mean over `dim` (None or []: all dims) by `tree_sum`."""
    out_dtype = dtype or x.dtype
    if not (out_dtype.is_floating_point or out_dtype.is_complex):
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {x.dtype}")
    dims = sorted({d % max(1, x.dim()) for d in dim}) if dim else list(range(x.dim()))
    kept = [s for i, s in enumerate(x.shape) if i not in dims]
    moved = x.to(_acc(out_dtype)).movedim(dims, list(range(x.dim() - len(dims), x.dim())))
    flat = moved.reshape(*kept, -1)
    out = tree_sum(flat) / flat.shape[-1]
    if keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return out.to(out_dtype)


def _shifted(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x - its max along dim, in fp32/fp64 with dim last; the row's sum of exp of it)."""
    t = x.to(_acc(x.dtype)).movedim(dim, -1)
    shifted = t - t.amax(-1, keepdim=True)
    return shifted, tree_sum(shifted.exp()).unsqueeze(-1)


def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    shifted, total = _shifted(x, dim)
    out = (shifted - total.log()).movedim(-1, dim)
    return out.to(torch.float32 if half_to_float else x.dtype).contiguous()


def softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    shifted, total = _shifted(x, dim)
    out = (shifted.exp() / total).movedim(-1, dim)
    return out.to(torch.float32 if half_to_float else x.dtype).contiguous()


def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
              **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Transformers' attention interface (query [B, H, Lq, D]; key, value [B, Hkv, S, D]; the eager mask
    [B, 1, Lq, S], additive, or boolean): softmax(q k^T * scaling + mask) v, every reduction by `tree_sum` in
    fp32, in chunks of rows and query positions (elementwise: a chunk's bounds change no bit). Returns
    [B, Lq, H, D], as the eager attention does (no weights)."""
    if dropout:
        raise ValueError("the invariant attention runs inference only (dropout 0)")
    b, h, lq, d = query.shape
    groups = h // key.shape[1]
    k = key.repeat_interleave(groups, dim=1).to(torch.float32)[:, :, None]  # [B, H, 1, S, D]
    v = value.repeat_interleave(groups, dim=1).to(torch.float32).transpose(-1, -2)[:, :, None]  # [B, H, 1, D, S]
    per_query = h * k.shape[3] * d * 4  # bytes of one query position's products
    rows = max(1, CHUNK_BYTES // (per_query * lq))
    step = lq if rows > 1 else max(1, CHUNK_BYTES // per_query)
    mask = attention_mask
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(torch.float32)
    out = query.new_empty((b, lq, h, d))
    for r in range(0, b, rows):
        for i in range(0, lq, step):
            q = query[r:r + rows, :, i:i + step].to(torch.float32)  # [R, H, q, D]
            scores = tree_sum(q[:, :, :, None, :] * k[r:r + rows]) * scaling  # [R, H, q, S]
            if mask is not None:
                m = mask[r:r + rows, :, i:i + step] if mask.shape[0] > 1 else mask[:, :, i:i + step]
                scores = (scores.masked_fill(~m, torch.finfo(torch.float32).min) if m.dtype == torch.bool
                          else scores + m)
            p = softmax(scores, -1, False)
            o = tree_sum(p[:, :, :, None, :] * v[r:r + rows])  # [R, H, q, D]
            out[r:r + rows, i:i + step] = o.transpose(1, 2).to(query.dtype)
    return out, None


_KERNELS = {"mm": mm, "addmm": addmm, "bmm": bmm, "mean.dim": mean_dim, "_softmax": softmax,
            "_log_softmax": log_softmax}


def register(devices: tuple[str, ...] = ("CPU", "CUDA")) -> torch.library.Library:
    """The kernels over aten's for these devices, until the returned library is destroyed (`kernels`)."""
    lib = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": what is meant
        warnings.filterwarnings("ignore", message=r"(?s).*Overriding a previously registered kernel")
        for op in OPS:
            for device in devices:
                lib.impl(op, _KERNELS[op], device)  # type: ignore[no-untyped-call]
    return lib


_FOR_LIFE: list[torch.library.Library] = []  # the engine's registration, alive as long as the process


def enable() -> str:
    """The kernels on for the rest of the process, and `attention` registered with Transformers: its name, the
    model's attention implementation."""
    if not _FOR_LIFE:
        _FOR_LIFE.append(register())
    return register_attention()


@contextmanager
def kernels() -> Iterator[None]:
    """The kernels on inside the block (the tests'; the engine keeps them on for its life)."""
    lib = register()
    try:
        yield
    finally:
        lib._destroy()  # type: ignore[no-untyped-call]


def register_attention() -> str:
    """`attention` as a Transformers attention implementation, with the eager attention's additive mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, eager_mask)
    return ATTENTION
