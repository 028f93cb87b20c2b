"""Grouped MoE GEMM probe: M tokens routed top-k over `experts` experts with uneven loads (router logits
biased from +skew to -skew across the experts), each expert a [hidden -> intermediate] projection, the
top-k outputs combined with the routing weights in a fixed order. Arms: `grouped_mm` (torch._grouped_mm over
the token slots sorted by expert, with int32 cumulative offsets; where torch has it, and where it accepts
this device and dtype: it wants CUDA sm90 and bf16) and `per_expert_loop` (one torch.mm per expert). Routing
is row-local, so token 0 goes to the same experts at every M; its output should not depend on M."""

from __future__ import annotations

import itertools
from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind, Unsupported, dtype_of


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> dict[str, Any]:
    experts, top_k, hidden, inter = (int(params[k]) for k in ("experts", "top_k", "hidden", "intermediate"))
    dtype, skew = dtype_of(params), float(params["skew"])
    router = torch.randn(m_max, experts, generator=gen) + torch.linspace(skew, -skew, experts)
    weights, chosen = torch.topk(torch.softmax(router, dim=-1), top_k, dim=-1)
    return {"x": torch.randn(m_max, hidden, generator=gen).to(device, dtype),
            "w": (torch.randn(experts, hidden, inter, generator=gen) / hidden ** 0.5).to(device, dtype),
            "weights": (weights / weights.sum(-1, keepdim=True)).to(device), "chosen": chosen}


def _bind(inputs: dict[str, Any], arm: str, m: int, params: dict[str, Any]) -> Call:
    x: torch.Tensor = inputs["x"][:m]
    w: torch.Tensor = inputs["w"]
    weights: torch.Tensor = inputs["weights"][:m]
    top_k = int(params["top_k"])
    slots_expert = inputs["chosen"][:m].reshape(-1)  # slot s = token s // top_k, its (s % top_k)-th expert
    order = torch.argsort(slots_expert, stable=True)  # slots sorted by expert
    counts = torch.bincount(slots_expert, minlength=w.shape[0])
    device = x.device
    order_d, token_of = order.to(device), (order // top_k).to(device)

    def combine(ys_sorted: torch.Tensor) -> torch.Tensor:
        ys = torch.empty_like(ys_sorted)
        ys[order_d] = ys_sorted
        return (ys.view(m, top_k, -1).float() * weights[:, :, None]).sum(1).to(x.dtype)

    if arm == "per_expert_loop":
        bounds = [0, *torch.cumsum(counts, 0).tolist()]

        def loop() -> torch.Tensor:
            xs = x[token_of]
            parts = [xs[a:b] @ w[e] for e, (a, b) in enumerate(itertools.pairwise(bounds)) if b > a]
            return combine(torch.cat(parts))
        return loop
    grouped_mm = getattr(torch, "_grouped_mm", None)
    if grouped_mm is None:
        raise Unsupported(f"torch {torch.__version__} has no torch._grouped_mm")
    offs = torch.cumsum(counts, 0).to(device=device, dtype=torch.int32)
    errors = []
    for layout, weights_in in (("row-major", w), ("column-major", w.transpose(-2, -1).contiguous().transpose(-2, -1))):
        try:  # some builds want each expert's weight column-major: the first layout it accepts is used
            grouped_mm(x[token_of], weights_in, offs=offs)
            return lambda: combine(grouped_mm(x[token_of], weights_in, offs=offs))
        except RuntimeError as exc:
            errors.append(f"{layout}: {str(exc).strip()[:300]}")
    raise Unsupported("torch._grouped_mm refused both weight layouts: " + " | ".join(errors))


DEFAULTS = {"experts": 8, "top_k": 2, "hidden": 256, "intermediate": 128, "skew": 1.5, "dtype": "bf16"}
OPS = {"moe_grouped_gemm": OpKind(("grouped_mm", "per_expert_loop"), DEFAULTS, _prepare, _bind,
                                  lambda p: (int(p["intermediate"]), int(p["hidden"]), None))}
