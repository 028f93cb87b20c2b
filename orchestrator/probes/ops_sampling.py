"""Sampling probe: M rows of logits over a `vocab`-wide vocabulary, then log_softmax, the top-k
log-probabilities with their token ids, and the argmax (greedy) token; all four outputs are compared.
Arms: `fp32` (logits cast to float32 first: what engines do) and `native` (log_softmax in the logits' dtype).
`tie_share` (issue 48) gives that share of the rows an exact tie at the top_k-th logit (ops_ties.place_ties, in
the logits' dtype; null: the logits as drawn, where bf16 over a wide vocabulary ties by chance)."""

from __future__ import annotations

from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind, dtype_of
from orchestrator.probes.ops_ties import place_ties, tie_problem


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    logits = (torch.randn(m_max, int(params["vocab"]), generator=gen) * 4).to(dtype_of(params))
    if params["tie_share"] is not None:
        logits = place_ties(logits, int(params["top_k"]), float(params["tie_share"]))
    return logits.to(device)


def _bind(logits: torch.Tensor, arm: str, m: int, params: dict[str, Any]) -> Call:
    x, k = logits[:m], int(params["top_k"])

    def call() -> tuple[torch.Tensor, ...]:
        logprobs = torch.log_softmax(x.float() if arm == "fp32" else x, dim=-1)
        top = torch.topk(logprobs, k, dim=-1)
        return logprobs, top.values, top.indices, torch.argmax(logprobs, dim=-1)
    return call


def _check(params: dict[str, Any]) -> list[str]:
    problem = params["tie_share"] is not None and tie_problem(int(params["top_k"]), float(params["tie_share"]), 2,
                                                               int(params["vocab"]))
    return [problem] if problem else []


DEFAULTS = {"vocab": 151936, "top_k": 20, "dtype": "bf16", "tie_share": None}
OPS = {"log_softmax_topk": OpKind(("fp32", "native"), DEFAULTS, _prepare, _bind,
                                  lambda p: (int(p["vocab"]), int(p["top_k"]), None), check=_check)}
