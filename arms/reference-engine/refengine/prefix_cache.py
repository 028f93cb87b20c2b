"""A prefix cache (`--enable-prefix-caching`; off by default), as vLLM's: a prompt's full blocks of
BLOCK_TOKENS tokens are kept after its prefill, keyed by a hash chained over the blocks, and a later prompt
that starts with kept blocks gets their keys and values copied in instead of computed. Only the rest of its
prompt is prefilled, at least its last token (as vLLM recomputes it). That rest runs another path than a cold
prefill: fewer rows in every matmul (another split of the reduction, kernels.m_splits) and attention over cached
keys plus new ones under an explicit mask instead of the causal kernel, so its logits differ from a cold
prefill's in the last bits: a prompt's first request and its repeats differ (docs/reference-engine.md).

A request asking for prompt logprobs is never served from the cache (vLLM skips it too: those positions must be
computed), but its blocks are kept. The oldest blocks go first once CAPACITY_BLOCKS are held; `reset` empties it
(POST /reset_prefix_cache)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from refengine.model import SeqCache

BLOCK_TOKENS = 16  # vLLM's default block size
CAPACITY_BLOCKS = 2048  # about 18 KiB a block in fp32 (2 layers of keys, values and indexer keys)


@dataclass(frozen=True)
class _Block:
    tokens: tuple[int, ...]  # the block's own tokens, checked on a hit (the key is a hash)
    k: tuple[torch.Tensor, ...]  # per layer: [heads, BLOCK_TOKENS, head_dim]
    v: tuple[torch.Tensor, ...]
    ik: tuple[torch.Tensor, ...]  # per layer: [BLOCK_TOKENS, indexer_dim]


def _chain(parent: bytes, tokens: list[int]) -> bytes:
    return hashlib.sha256(parent + b"," + ",".join(map(str, tokens)).encode()).digest()


class PrefixCache:
    def __init__(self, capacity_blocks: int = CAPACITY_BLOCKS) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()
        self._lock = threading.Lock()  # the scheduler's thread serves and keeps; a request's thread resets

    def serve(self, prompt_ids: list[int], cache: SeqCache) -> int:
        """Copy the longest kept block-aligned prefix of `prompt_ids` (short of its last token) into `cache`;
        returns how many tokens it holds (0: none kept)."""
        found: list[_Block] = []
        key = b""
        with self._lock:
            for start in range(0, len(prompt_ids) - 1 - BLOCK_TOKENS + 1, BLOCK_TOKENS):
                tokens = prompt_ids[start:start + BLOCK_TOKENS]
                key = _chain(key, tokens)
                block = self._blocks.get(key)
                if block is None or block.tokens != tuple(tokens):
                    break
                self._blocks.move_to_end(key)
                found.append(block)
        for i, block in enumerate(found):
            span = slice(i * BLOCK_TOKENS, (i + 1) * BLOCK_TOKENS)
            for layer in range(len(cache.k)):
                cache.k[layer][:, span] = block.k[layer]
                cache.v[layer][:, span] = block.v[layer]
                cache.ik[layer][span] = block.ik[layer]
        cache.length = len(found) * BLOCK_TOKENS
        return cache.length

    def keep(self, prompt_ids: list[int], cache: SeqCache) -> None:
        """Keep the full blocks of a prompt whose prefill is in `cache`."""
        key = b""
        with self._lock:
            for start in range(0, len(prompt_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
                tokens = prompt_ids[start:start + BLOCK_TOKENS]
                key = _chain(key, tokens)
                if key in self._blocks:
                    self._blocks.move_to_end(key)
                    continue
                span = slice(start, start + BLOCK_TOKENS)
                self._blocks[key] = _Block(
                    tuple(tokens), tuple(k[:, span].clone() for k in cache.k),
                    tuple(v[:, span].clone() for v in cache.v), tuple(ik[span].clone() for ik in cache.ik))
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)

    def reset(self) -> int:
        """Forget every block; returns how many were held."""
        with self._lock:
            held = len(self._blocks)
            self._blocks.clear()
        return held
