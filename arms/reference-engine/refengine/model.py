"""A tiny MoE transformer with seeded weights, a KV cache and a DeepSeek-style sparse indexer.

Shapes: d_model 64, 2 layers, 4 heads (RoPE), MoE FFN with 8 experts and top-4 routing, a
257-token byte vocabulary. Weights come from a local ``torch.Generator`` so every start with the
same ``seed`` builds bit-identical weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from refengine import kernels
from refengine.tokenizer import EOS_ID, VOCAB_SIZE

D_MODEL = 64
N_LAYERS = 2
N_HEADS = 4
HEAD_DIM = D_MODEL // N_HEADS
N_EXPERTS = 8
TOP_K = 4
EXPERT_HIDDEN = 128
INDEXER_DIM = 16
INDEXER_LEVELS = 8  # coarse quantisation: dense ties at the top-k threshold
QUERY_CHUNK = 512
POS_STD = 0.7  # bounds the [heads, chunk, keys] score tensor during long prefills
DEFECT_SPLITS = 8  # the planted decode-only defect's split-K partials (`decode_logits`)


@dataclass
class KernelParams:
    """Per-batch kernel choices (backend, tuned tile, finalize mode, indexer policy)."""

    backend: str = "flashinfer_cutlass"
    k_chunk: int = kernels.DEFAULT_TILE["k_chunk"]
    fused_finalize: bool = False
    indexer_budget: int = 2048
    topk_tiebreak: str = "stable"
    router_tie_share: float = 0.0  # the share of router rows given a tie at the k-th value (0: none)


@dataclass
class SeqCache:
    """KV cache of one sequence. ``sparse`` is fixed at prefill from the prompt length."""

    capacity: int
    sparse: bool
    length: int = 0
    k: list[torch.Tensor] = field(default_factory=list)
    v: list[torch.Tensor] = field(default_factory=list)
    ik: list[torch.Tensor] = field(default_factory=list)


class TinyMoE:
    def __init__(self, seed: int, max_model_len: int, device: torch.device, dtype: torch.dtype) -> None:
        self.device = device
        self.dtype = dtype
        self.max_model_len = max_model_len
        g = torch.Generator().manual_seed(seed)

        def rnd(*shape: int, std: float) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) * std).to(device=device, dtype=dtype)

        d = D_MODEL
        self.embed = rnd(VOCAB_SIZE, d, std=1.0)
        # Learned-style absolute positions on top of RoPE: breaks short greedy cycles.
        self.pos_embed = rnd(max_model_len, d, std=POS_STD)
        self.layers: list[dict[str, torch.Tensor]] = []
        for _ in range(N_LAYERS):
            self.layers.append(
                {
                    "norm1": torch.ones(d, device=device, dtype=dtype),
                    "wqkv": rnd(3 * d, d, std=1.0 / math.sqrt(d)),
                    "widx": rnd(2 * INDEXER_DIM, d, std=1.0 / math.sqrt(d)),
                    "wo": rnd(d, d, std=1.0 / math.sqrt(d)),
                    "norm2": torch.ones(d, device=device, dtype=dtype),
                    "wr": rnd(N_EXPERTS, d, std=2.0 / math.sqrt(d)),
                    "w1": rnd(N_EXPERTS, EXPERT_HIDDEN, d, std=1.0 / math.sqrt(d)),
                    "w2": rnd(N_EXPERTS, d, EXPERT_HIDDEN, std=1.0 / math.sqrt(EXPERT_HIDDEN)),
                }
            )
        self.norm_f = torch.ones(d, device=device, dtype=dtype)
        # Logit std ~3 after the final norm: greedy output is varied, logprobs well spread.
        self.lm_head = rnd(VOCAB_SIZE, d, std=3.0 / math.sqrt(d))
        bias = torch.zeros(VOCAB_SIZE)
        bias[0x20:0x7F] = 4.0  # favour printable ASCII so completions look like text
        bias[EOS_ID] = -2.0  # EOS possible but rare
        self.lm_bias = bias.to(device)
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        ang = torch.arange(max_model_len, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos = ang.cos().to(device)
        self.sin = ang.sin().to(device)

    # ---- caches -------------------------------------------------------------------------
    def new_cache(self, prompt_len: int, max_tokens: int, indexer_budget: int) -> SeqCache:
        cap = prompt_len + max_tokens
        c = SeqCache(capacity=cap, sparse=prompt_len > indexer_budget)
        for _ in range(N_LAYERS):
            c.k.append(torch.zeros(N_HEADS, cap, HEAD_DIM, device=self.device, dtype=torch.float32))
            c.v.append(torch.zeros(N_HEADS, cap, HEAD_DIM, device=self.device, dtype=torch.float32))
            c.ik.append(torch.zeros(cap, INDEXER_DIM, device=self.device, dtype=torch.float32))
        return c

    # ---- forward ------------------------------------------------------------------------
    def forward(
        self, caches: list[SeqCache], tokens: list[torch.Tensor], stacked: bool, kp: KernelParams
    ) -> list[torch.Tensor]:
        """Run new ``tokens`` of each sequence; return final-normed hidden rows per sequence.

        ``stacked`` puts the rows of all sequences into one [M, d] matrix for every linear
        layer (batch invariance off); otherwise each sequence runs as if alone.
        """
        if stacked:
            return self._forward_packed(caches, tokens, kp)
        return [self._forward_packed([c], [t], kp)[0] for c, t in zip(caches, tokens, strict=True)]

    def logits(self, rows: list[torch.Tensor], stacked: bool) -> list[torch.Tensor]:
        """fp32 log-probabilities [n, vocab] for hidden rows (lm_head stacked or per sequence)."""

        def head(x: torch.Tensor) -> torch.Tensor:
            return torch.log_softmax(kernels.linear(x, self.lm_head).float() + self.lm_bias, dim=-1)

        if stacked and len(rows) > 1:
            out = head(torch.cat(rows))
            return list(torch.split(out, [r.shape[0] for r in rows]))
        return [head(r) for r in rows]

    def decode_logits(self, rows: list[torch.Tensor]) -> list[torch.Tensor]:
        """The planted decode-only defect (--decode-defect): `logits` with the lm_head's reduction split in
        DEFECT_SPLITS partials, each rounded to bfloat16 and summed last to first, as a split-K decode kernel
        of lower precision would; the prefill path (`logits`) has no such step."""
        x = torch.cat(rows)
        step = D_MODEL // DEFECT_SPLITS
        acc = torch.zeros(x.shape[0], VOCAB_SIZE, device=self.device, dtype=torch.bfloat16)
        for s in reversed(range(DEFECT_SPLITS)):
            part = x[:, s * step : (s + 1) * step] @ self.lm_head[:, s * step : (s + 1) * step].T
            acc = acc + part.to(torch.bfloat16)
        out = torch.log_softmax(acc.float() + self.lm_bias, dim=-1)
        return list(torch.split(out, [r.shape[0] for r in rows]))

    def _forward_packed(
        self, caches: list[SeqCache], tokens: list[torch.Tensor], kp: KernelParams
    ) -> list[torch.Tensor]:
        sizes = [int(t.shape[0]) for t in tokens]
        pos = torch.cat([torch.arange(c.length, c.length + n) for c, n in zip(caches, sizes, strict=True)])
        x = self.embed[torch.cat(tokens).to(self.device)] + self.pos_embed[pos.to(self.device)]
        for li, p in enumerate(self.layers):
            h = _rmsnorm(x, p["norm1"])
            qkv = kernels.linear(h, p["wqkv"])
            idx = kernels.linear(h, p["widx"])
            outs = []
            off = 0
            for c, n in zip(caches, sizes, strict=True):
                outs.append(self._attention(c, li, qkv[off : off + n], idx[off : off + n], kp))
                off += n
            x = x + kernels.linear(torch.cat(outs), p["wo"])
            x = x + self._moe(_rmsnorm(x, p["norm2"]), p, kp)
        for c, n in zip(caches, sizes, strict=True):
            c.length += n
        return list(torch.split(_rmsnorm(x, self.norm_f), sizes))

    def _attention(
        self, c: SeqCache, li: int, qkv: torch.Tensor, idx: torch.Tensor, kp: KernelParams
    ) -> torch.Tensor:
        n = qkv.shape[0]
        p0 = c.length
        pos = torch.arange(p0, p0 + n, device=self.device)
        q, k, v = qkv.float().view(n, 3, N_HEADS, HEAD_DIM).unbind(1)
        q = self._rope(q.transpose(0, 1), pos)
        c.k[li][:, p0 : p0 + n] = self._rope(k.transpose(0, 1), pos)
        c.v[li][:, p0 : p0 + n] = v.transpose(0, 1)
        iq, ik = torch.split(idx.float(), INDEXER_DIM, dim=1)
        c.ik[li][p0 : p0 + n] = ik
        total = p0 + n
        keys, vals, ikeys = c.k[li][:, :total], c.v[li][:, :total], c.ik[li][:total]
        out = torch.empty(N_HEADS, n, HEAD_DIM, device=self.device)
        # Rows [0, dense_end) see at most `budget` keys (or the sequence is dense): exact attention.
        dense_end = n
        if c.sparse:
            dense_end = max(0, min(n, kp.indexer_budget - p0))
        if dense_end > 0:
            if p0 == 0:
                out[:, :dense_end] = _sdpa(q[:, :dense_end], keys[:, :dense_end], vals[:, :dense_end], None)
            elif n == 1:
                out[:] = _sdpa(q, keys, vals, None)
            else:
                kpos = torch.arange(total, device=self.device)
                causal = kpos[None, :] <= pos[:dense_end, None]
                out[:, :dense_end] = _sdpa(q[:, :dense_end], keys, vals, causal)
        kpos = torch.arange(total, device=self.device)
        for s in range(dense_end, n, QUERY_CHUNK):
            e = min(n, s + QUERY_CHUNK)
            causal = kpos[None, :] <= pos[s:e, None]
            mask = self._sparse_mask(iq[s:e], ikeys, causal, kp)
            out[:, s:e] = _sdpa(q[:, s:e], keys, vals, mask)
        return out.transpose(0, 1).reshape(n, D_MODEL).to(self.dtype)

    def _sparse_mask(
        self,
        iq: torch.Tensor,
        ikeys: torch.Tensor,
        valid: torch.Tensor,
        kp: KernelParams,
    ) -> torch.Tensor:
        """Restrict each row (all see more than ``budget`` keys) to the indexer's top-``budget``."""
        levels = (torch.sigmoid(iq @ ikeys.T) * INDEXER_LEVELS).floor().clamp_(max=INDEXER_LEVELS - 1)
        return kernels.topk_select(levels, valid, kp.indexer_budget, kp.topk_tiebreak)

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[pos][None], self.sin[pos][None]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def _moe(self, h: torch.Tensor, p: dict[str, torch.Tensor], kp: KernelParams) -> torch.Tensor:
        probs = torch.softmax(kernels.linear(h, p["wr"]).float(), dim=-1)
        weights, experts = kernels.router_topk(probs, TOP_K, kp.router_tie_share, kp.topk_tiebreak)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        contrib = torch.zeros(h.shape[0], TOP_K, D_MODEL, device=self.device, dtype=torch.float32)
        for e in range(N_EXPERTS):
            rows, slots = (experts == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            up = F.gelu(kernels.linear(h[rows], p["w1"][e]))
            y = kernels.expert_down(up, p["w2"][e], kp.backend, kp.k_chunk)
            contrib[rows, slots] = y * weights[rows, slots, None]
        return kernels.finalize(contrib, kp.fused_finalize, self.dtype)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """fp32 attention over [H, L, E]; ``mask`` [Lq, Lk] True = attend, None with Lq == Lk = causal."""
    if mask is None and q.shape[1] == k.shape[1] and q.shape[1] > 1:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if mask is not None:
        # An additive float mask is markedly faster than a bool mask in the CPU kernel.
        mask = torch.zeros(mask.shape, device=q.device, dtype=q.dtype).masked_fill_(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w
