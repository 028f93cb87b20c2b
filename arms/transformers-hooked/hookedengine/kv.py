"""A window's KV cache and the attention mask of its next forward: Transformers' DynamicCache, grown by a column
each decode step (the default), or, with --static-cache, its StaticCache preallocated at a fixed length and a
mask as long, so that every decode step of a window has the same shapes and a CUDA graph can replay it
(--cuda-graphs needs it). The two attend over different lengths (the static cache's unfilled columns masked), so
an A/B of graphs gives both arms --static-cache and varies graphs alone."""

from __future__ import annotations

from typing import Any

import torch

# A static cache's length rounded up to this many tokens: windows of nearby lengths share a recorded graph
BUCKET_TOKENS = 64


def static_length(width: int, max_new_tokens: int) -> int:
    """The static cache's length for a window `width` tokens wide that decodes up to `max_new_tokens`."""
    return -(-(width + max_new_tokens) // BUCKET_TOKENS) * BUCKET_TOKENS


class KVWindow:
    """The cache and the 2-D attention mask (1: a token to attend to) of one window's forwards."""

    def __init__(self, model_config: Any, mask: torch.Tensor, max_new_tokens: int, static: bool) -> None:
        self.static = static
        self.filled = mask.shape[1]  # columns written so far: the prompt's, then one per decode step
        if static:
            from transformers import StaticCache

            length = static_length(self.filled, max_new_tokens)
            self.cache: Any = StaticCache(config=model_config, max_cache_len=length)
            self.mask = torch.zeros((mask.shape[0], length), dtype=mask.dtype)
            self.mask[:, :self.filled] = mask
        else:
            from transformers import DynamicCache

            self.cache, self.mask = DynamicCache(), mask

    def grow(self) -> torch.Tensor:
        """The mask of the next decode step: one more column, every row's new token attended to."""
        if self.static:
            self.mask[:, self.filled] = 1
        else:
            self.mask = torch.cat([self.mask, torch.ones((self.mask.shape[0], 1), dtype=self.mask.dtype)], dim=1)
        self.filled += 1
        return self.mask
