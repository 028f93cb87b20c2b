"""RMSNorm probe: M tokens of `hidden` values. Arms: `manual` (fp32 mean of squares, rsqrt, weight; the
output in the input's dtype: what engines write by hand) and `torch_rms_norm` (torch.nn.functional.rms_norm,
where torch has it). Row-local: row 0 should not depend on M."""

from __future__ import annotations

from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind, Unsupported, dtype_of


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> dict[str, Any]:
    hidden, dtype = int(params["hidden"]), dtype_of(params)
    return {"x": (torch.randn(m_max, hidden, generator=gen) * 3).to(device, dtype),
            "w": (1 + 0.1 * torch.randn(hidden, generator=gen)).to(device, dtype), "eps": float(params["eps"])}


def _bind(inputs: dict[str, Any], arm: str, m: int, params: dict[str, Any]) -> Call:
    x: torch.Tensor = inputs["x"][:m]
    w: torch.Tensor = inputs["w"]
    eps = float(inputs["eps"])
    if arm == "manual":
        def manual() -> torch.Tensor:
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
        return manual
    rms_norm = getattr(torch.nn.functional, "rms_norm", None)
    if rms_norm is None:
        raise Unsupported(f"torch {torch.__version__} has no torch.nn.functional.rms_norm")
    return lambda: rms_norm(x, (x.shape[-1],), w, eps)


OPS = {"rmsnorm": OpKind(("manual", "torch_rms_norm"), {"hidden": 4096, "eps": 1e-6, "dtype": "bf16"}, _prepare,
                         _bind, lambda p: (int(p["hidden"]), int(p["hidden"]), None))}
