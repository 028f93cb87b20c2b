"""Sampling probe: M rows of logits over a `vocab`-wide vocabulary, then log_softmax, the top-k
log-probabilities with their token ids, and the argmax (greedy) token; all four outputs are compared.
Arms: `fp32` (logits cast to float32 first: what engines do) and `native` (log_softmax in the logits' dtype)."""

from __future__ import annotations

from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind, dtype_of


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    return (torch.randn(m_max, int(params["vocab"]), generator=gen) * 4).to(device, dtype_of(params))


def _bind(logits: torch.Tensor, arm: str, m: int, params: dict[str, Any]) -> Call:
    x, k = logits[:m], int(params["top_k"])

    def call() -> tuple[torch.Tensor, ...]:
        logprobs = torch.log_softmax(x.float() if arm == "fp32" else x, dim=-1)
        top = torch.topk(logprobs, k, dim=-1)
        return logprobs, top.values, top.indices, torch.argmax(logprobs, dim=-1)
    return call


OPS = {"log_softmax_topk": OpKind(("fp32", "native"), {"vocab": 151936, "top_k": 20, "dtype": "bf16"}, _prepare,
                                  _bind, lambda p: (int(p["vocab"]), int(p["top_k"]), None))}
