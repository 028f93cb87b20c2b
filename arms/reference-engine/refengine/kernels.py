"""Numerical kernels whose reduction order is the thing under study.

Every function here is deterministic for fixed inputs and fixed parameters; the only sources of
call-to-call variation are the explicit ``rng`` arguments (drawn by the caller from an unseeded
source), which model atomics-style reductions.
"""

from __future__ import annotations

import random

import torch

# Default tile for the MoE expert reduction (used when nothing was tuned yet).
DEFAULT_TILE: dict[str, int] = {"k_chunk": 32}


def unseeded_generator() -> torch.Generator:
    """A CPU generator seeded from the OS: models hardware races (atomics, topk races)."""
    return torch.Generator().manual_seed(random.SystemRandom().getrandbits(62))


def m_splits(m: int) -> int:
    """Split-K factor picked from the row count M, as GEMM heuristics do.

    This makes a row's bits depend on how many other rows share the matmul (batch-shape
    sensitivity) on every device; on CPU fp32 torch already shows it (docs/reference-engine.md, "Mechanisms").
    """
    if m <= 1:
        return 1
    return 2 if m < 8 else 4


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w[N, K].T with an M-dependent split of the K reduction, summed in fp32."""
    splits = m_splits(x.shape[0])
    k = x.shape[1]
    if splits == 1 or k % splits:
        return x @ w.T
    step = k // splits
    acc = (x[:, :step] @ w[:, :step].T).float()
    for s in range(1, splits):
        acc = acc + (x[:, s * step : (s + 1) * step] @ w[:, s * step : (s + 1) * step].T).float()
    return acc.to(x.dtype)


def expert_down(h: torch.Tensor, w: torch.Tensor, backend: str, k_chunk: int) -> torch.Tensor:
    """Expert down-projection h [M, H] @ w [D, H].T, reduced over H in chunks of ``k_chunk``.

    The backend fixes the order in which chunk partials are summed (each repeatable, mutually
    different bits); the tile (``k_chunk``) is what autotuning changes.
    """
    hidden = h.shape[1]
    k_chunk = max(1, min(k_chunk, hidden))
    parts = [
        (h[:, s : s + k_chunk] @ w[:, s : s + k_chunk].T).float() for s in range(0, hidden, k_chunk)
    ]
    if backend == "triton":
        order = parts
    elif backend == "cutlass":
        # Pairwise tree reduction.
        while len(parts) > 1:
            nxt = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]
            if len(parts) % 2:
                nxt.append(parts[-1])
            parts = nxt
        return parts[0]
    else:  # flashinfer_cutlass: reverse split-K order
        order = parts[::-1]
    acc = order[0]
    for p in order[1:]:
        acc = acc + p
    return acc


def finalize(contrib: torch.Tensor, fused: bool, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Reduce the top-k expert outputs contrib [T, k, D] (fp32) into [T, D] of `out_dtype`.

    Unfused: fixed slot order. Fused: each token's slots are added in an order drawn from an
    unseeded source per call, which is what non-associative atomics do. The sum accumulates in the
    output dtype, as atomics into a bf16 output do: in fp32 then cast to bf16 the order would be
    rounded away (measured on an H200: 1 distinct in 8 with fused finalize on).
    """
    out_dtype = out_dtype or contrib.dtype
    contrib = contrib.to(out_dtype)
    if fused and contrib.shape[1] > 1:
        order = torch.rand(contrib.shape[0], contrib.shape[1], generator=unseeded_generator()).argsort(dim=1)
        order = order.to(contrib.device)
        contrib = contrib.gather(1, order[:, :, None].expand(-1, -1, contrib.shape[2]))
    acc = contrib[:, 0].clone()
    for slot in range(1, contrib.shape[1]):
        acc = acc + contrib[:, slot]
    return acc


def topk_select(levels: torch.Tensor, valid: torch.Tensor, k: int, tiebreak: str) -> torch.Tensor:
    """Boolean mask [R, T] of the top-``k`` keys per row by quantised indexer level.

    ``levels`` holds a few integer levels, so ties at the k-th threshold are dense. Keys above the
    threshold level are always kept; the remaining slots go to keys tied at the threshold, in key
    order for ``stable`` (lowest index wins) or in an order drawn from an unseeded source per call
    for ``random`` (as a non-deterministic persistent top-k does).
    """
    rows, total = levels.shape
    lv = levels.long().masked_fill(~valid, -1)
    n_levels = int(lv.max().item()) + 2
    counts = torch.zeros(rows, n_levels, dtype=torch.long, device=lv.device)
    counts.scatter_add_(1, lv + 1, torch.ones_like(lv))
    # at_or_above[:, j] = number of valid keys with level >= j - 1 (column 0 is the invalid bucket).
    at_or_above = counts.flip(1).cumsum(1).flip(1)
    thr_col = (at_or_above[:, 1:] >= k).long().sum(1)  # highest level whose tail holds >= k keys
    thr = thr_col - 1  # level value (column c <-> level c-1)
    above = at_or_above.gather(1, (thr_col + 1).clamp(max=n_levels - 1)[:, None])[:, 0]
    above = torch.where(thr_col + 1 >= n_levels, torch.zeros_like(above), above)
    need = k - above
    keep = lv > thr[:, None]
    tie = lv == thr[:, None]
    if tiebreak == "random":
        perm = torch.randperm(total, generator=unseeded_generator()).to(lv.device)
        tie_p = tie.index_select(1, perm)
        chosen_p = tie_p & (tie_p.long().cumsum(1) <= need[:, None])
        chosen = chosen_p.index_select(1, perm.argsort())
    else:
        chosen = tie & (tie.long().cumsum(1) <= need[:, None])
    return (keep | chosen) & valid


TIE_HASH_MOD = 9973  # a prime: the row hash's range, so tie_share is honoured to 1/9973


def tied_rows(scores: torch.Tensor, share: float) -> torch.Tensor:
    """Which rows get a tie: those whose hash of their own scores' bits falls under ``share``. Row-local, so a
    row ties wherever its scores are the same (alone or in any batch); about ``share`` of distinct rows."""
    words = scores.float().contiguous().view(torch.int32).long()
    coeff = torch.arange(1, scores.shape[-1] + 1, device=scores.device, dtype=torch.long) * 7919
    return (words * coeff).sum(-1).remainder(TIE_HASH_MOD) < share * TIE_HASH_MOD


def tie_scores(probs: torch.Tensor, k: int, tie_share: float) -> torch.Tensor:
    """``probs`` with, in the rows ``tied_rows`` picks, the (k+1)-th largest value raised to the k-th."""
    values, order = probs.sort(dim=-1, descending=True, stable=True)
    values[:, k] = torch.where(tied_rows(probs, tie_share), values[:, k - 1], values[:, k])
    return torch.empty_like(probs).scatter_(1, order, values)


def router_topk(probs: torch.Tensor, k: int, tie_share: float, tiebreak: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The router's top-``k`` (weights, experts) of each row. ``tie_share`` 0: ``probs.topk`` as ever. Above 0,
    the rows ``tied_rows`` picks get an exact tie at the k-th value (the (k+1)-th score raised to it, as
    quantised router logits tie), and the selection breaks it as ``topk_select`` does: ``stable`` the lowest
    expert index (the stable-sort fix), ``random`` an order drawn from an unseeded source per call."""
    if tie_share <= 0:
        return probs.topk(k, dim=-1)
    scores = tie_scores(probs, k, tie_share)
    perm = torch.arange(scores.shape[1], device=scores.device)
    if tiebreak == "random":
        perm = torch.randperm(scores.shape[1], generator=unseeded_generator()).to(scores.device)
    picked = scores[:, perm].sort(dim=-1, descending=True, stable=True).indices[:, :k]
    experts = perm[picked]
    return scores.gather(1, experts), experts
