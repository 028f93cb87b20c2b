"""The harness's own negative controls. `must_vary`: each row summed in a fresh random order every call
(torch.randperm from the global generator; values spread over 2^-24..2^24 so that the order changes the
float32 result): repeats must show more than one digest and row 0 must change with M. `must_not_vary`: a
row-local dot product computed for each row alone, one call per row: one digest, row 0 equal at every M.
A probe that reports otherwise measured nothing."""

from __future__ import annotations

from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> dict[str, Any]:
    width = int(params["width"])
    spread = torch.exp2(torch.randint(-24, 25, (m_max, width), generator=gen).float())
    signs = torch.randint(0, 2, (m_max, width), generator=gen).float() * 2 - 1
    return {"x": (torch.rand(m_max, width, generator=gen) * spread * signs).to(device),
            "w": torch.randn(width, generator=gen).to(device)}


def _shuffled(inputs: dict[str, Any], arm: str, m: int, params: dict[str, Any]) -> Call:
    x = inputs["x"][:m]
    return lambda: x[:, torch.randperm(x.shape[1], device=x.device)].sum(-1)


def _row_by_row(inputs: dict[str, Any], arm: str, m: int, params: dict[str, Any]) -> Call:
    x, w = inputs["x"][:m], inputs["w"]
    return lambda: torch.stack([(x[i] * w).sum() for i in range(m)])


def _dims(params: dict[str, Any]) -> tuple[int, int, int | None]:
    return 1, int(params["width"]), None


OPS = {"control_must_vary": OpKind(("randperm_sum",), {"width": 4096}, _prepare, _shuffled, _dims, "must_vary"),
       "control_must_not_vary": OpKind(("row_by_row",), {"width": 4096}, _prepare, _row_by_row, _dims,
                                       "must_not_vary")}
