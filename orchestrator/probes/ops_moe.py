"""Grouped MoE GEMM probe: M tokens routed top-k over `experts` experts with uneven loads (router logits
biased from +skew to -skew across the experts), each expert a [hidden -> intermediate] projection, the
top-k outputs combined with the routing weights in a fixed order. Arms: `grouped_mm` (torch._grouped_mm over
the token slots sorted by expert, with int32 cumulative offsets; where torch has it, and where it accepts
this device and dtype: it wants CUDA sm90 and bf16) and `per_expert_loop` (one torch.mm per expert). Routing
is row-local, so token 0 goes to the same experts at every M; its output should not depend on M.

The router (issue 48): `tie_share` gives that share of the tokens an exact tie at the k-th expert's score
(ops_ties.place_ties; null: the scores as drawn), `sorted` is the routing top-k's flag, and `route` says where
it runs: `prepared` (once, on the CPU, before the calls: the GEMM alone is probed) or `per_call` (every call
routes on the device with torch.topk, so its tie-break is part of the output)."""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import torch

from orchestrator.probes.harness import Call, OpKind, Unsupported, dtype_of
from orchestrator.probes.ops_ties import place_ties, tie_problem


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> dict[str, Any]:
    experts, top_k, hidden, inter = (int(params[k]) for k in ("experts", "top_k", "hidden", "intermediate"))
    dtype, skew = dtype_of(params), float(params["skew"])
    router = torch.randn(m_max, experts, generator=gen) + torch.linspace(skew, -skew, experts)
    scores = torch.softmax(router, dim=-1)
    if params["tie_share"] is not None:
        scores = place_ties(scores, top_k, float(params["tie_share"]))
    return {"x": torch.randn(m_max, hidden, generator=gen).to(device, dtype),
            "w": (torch.randn(experts, hidden, inter, generator=gen) / hidden ** 0.5).to(device, dtype),
            "scores": scores.to(device), "route": _route(scores, top_k, bool(params["sorted"]))}


def _route(scores: torch.Tensor, top_k: int, ordered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights normalised per token, chosen experts) of the top-k."""
    weights, chosen = torch.topk(scores, top_k, dim=-1, sorted=ordered)
    return weights / weights.sum(-1, keepdim=True), chosen


class Routing(NamedTuple):
    """Where each token's slots go: the weights, the slots sorted by expert, their tokens, the per-expert loop's
    bounds, grouped_mm's int32 offsets."""

    weights: torch.Tensor
    order: torch.Tensor
    token_of: torch.Tensor
    bounds: list[int]
    offs: torch.Tensor


def _bind(inputs: dict[str, Any], arm: str, m: int, params: dict[str, Any]) -> Call:
    x: torch.Tensor = inputs["x"][:m]
    w: torch.Tensor = inputs["w"]
    top_k, device = int(params["top_k"]), x.device
    grouped_mm = getattr(torch, "_grouped_mm", None)
    if arm == "grouped_mm" and grouped_mm is None:
        raise Unsupported(f"torch {torch.__version__} has no torch._grouped_mm")

    def route_now() -> Routing:
        if params["route"] == "per_call":
            weights, chosen = _route(inputs["scores"][:m], top_k, bool(params["sorted"]))
        else:
            weights, chosen = (t[:m] for t in inputs["route"])
        slots_expert = chosen.reshape(-1)  # slot s = token s // top_k, its (s % top_k)-th expert
        order = torch.argsort(slots_expert, stable=True)  # slots sorted by expert
        ends = torch.cumsum(torch.bincount(slots_expert, minlength=w.shape[0]), 0)
        return Routing(weights.to(device), order.to(device), (order // top_k).to(device),
                       [0, *ends.tolist()] if arm == "per_expert_loop" else [], ends.to(device, torch.int32))

    prepared = route_now() if params["route"] == "prepared" else None

    def routed() -> Routing:
        return prepared or route_now()

    def combine(ys_sorted: torch.Tensor, r: Routing) -> torch.Tensor:
        ys = torch.empty_like(ys_sorted)
        ys[r.order] = ys_sorted
        return (ys.view(m, top_k, -1).float() * r.weights[:, :, None]).sum(1).to(x.dtype)

    if arm == "per_expert_loop":
        def loop() -> torch.Tensor:
            r = routed()
            xs = x[r.token_of]
            parts = [xs[a:b] @ w[e] for e, (a, b) in enumerate(itertools.pairwise(r.bounds)) if b > a]
            return combine(torch.cat(parts), r)
        return loop
    assert grouped_mm is not None
    first = routed()
    errors = []
    for layout, weights_in in (("row-major", w), ("column-major", w.transpose(-2, -1).contiguous().transpose(-2, -1))):
        try:  # some builds want each expert's weight column-major: the first layout it accepts is used
            grouped_mm(x[first.token_of], weights_in, offs=first.offs)
        except RuntimeError as exc:
            errors.append(f"{layout}: {str(exc).strip()[:300]}")
            continue

        def grouped(weights_in: torch.Tensor = weights_in) -> torch.Tensor:
            r = routed()
            return combine(grouped_mm(x[r.token_of], weights_in, offs=r.offs), r)
        return grouped
    raise Unsupported("torch._grouped_mm refused both weight layouts: " + " | ".join(errors))


def _check(params: dict[str, Any]) -> list[str]:
    problems = [] if params["route"] in ROUTES else [f"route {params['route']!r} is not one of {list(ROUTES)}"]
    if params["tie_share"] is not None:
        problem = tie_problem(int(params["top_k"]), float(params["tie_share"]), 2, int(params["experts"]))
        problems += [problem] if problem else []
    return problems


ROUTES = ("prepared", "per_call")
DEFAULTS = {"experts": 8, "top_k": 2, "hidden": 256, "intermediate": 128, "skew": 1.5, "dtype": "bf16",
            "tie_share": None, "sorted": True, "route": "prepared"}
OPS = {"moe_grouped_gemm": OpKind(("grouped_mm", "per_expert_loop"), DEFAULTS, _prepare, _bind,
                                  lambda p: (int(p["intermediate"]), int(p["hidden"]), None), check=_check)}
