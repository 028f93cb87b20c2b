"""--compile and --cuda-graphs: the model's forward through torch.compile, one variable each (both off by default).

compile alone: TorchInductor's kernels, launched one by one (torch.compile's default mode), for the prefill and
each decode step; cuda_graphs alone: each decode step's own kernels captured and replayed as CUDA graphs (the
"cudagraphs" backend: no Inductor), one graph per window shape, over a static KV cache (--static-cache, kv.py: a
growing cache changes a step's shapes at every step); both: Inductor's kernels in those graphs (mode
"reduce-overhead"). With graphs the prefill runs eager code, as Transformers' own generate with a static cache
does. A replayed graph writes its outputs into a pool its next replay reuses, so the engine copies what it keeps of
each step (the logits; a growing cache's tensors) out of it (`keep`).

Digests hook every module's call; a compiled forward does not run hooks attached after it was compiled (they
would be silently skipped), so these modes need --no-digests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# A new shape per prompt length and decode step: compiled again until shapes are marked dynamic, never
# silently falling back to eager code for the want of room
RECOMPILE_LIMIT = 256


def options(cuda_graphs: bool, compile: bool) -> dict[str, Any]:
    """torch.compile's arguments for the modes; {}: neither (the eager forward)."""
    if cuda_graphs and compile:
        return {"mode": "reduce-overhead"}
    if cuda_graphs:
        return {"backend": "cudagraphs"}
    return {"backend": "inductor"} if compile else {}


def refusal(cuda_graphs: bool, compile: bool, device: torch.device, digests: bool, continuous: bool,
            static_cache: bool) -> str | None:
    """Why the modes cannot run here, in one line with the fix; None: they can."""
    if cuda_graphs and device.type != "cuda":
        return (f"--cuda-graphs: CUDA graphs capture CUDA kernels, and this engine runs on {device.type}: drop "
                "--cuda-graphs, or give --device cuda where a GPU is (--compile runs on a CPU too)")
    if cuda_graphs and not static_cache:
        return ("--cuda-graphs: a graph replays fixed shapes, and a growing KV cache changes them at every step: "
                "add --static-cache (to every arm of the A/B, so that graphs stay its one variable)")
    if (cuda_graphs or compile) and digests:
        flag = "--cuda-graphs" if cuda_graphs else "--compile"
        return (f"{flag}: digests hook every module's call, which a compiled forward skips: add --no-digests "
                "(this arm then serves flagged requests without digests)")
    if (cuda_graphs or compile) and continuous:
        return ("--cuda-graphs and --compile compile the static window's forward; --continuous-batching runs "
                "Transformers' own: drop one")
    return None


@dataclass(frozen=True)
class Forwards:
    """What the engine calls for a window's prefill and for each of its decode steps: the model itself (eager
    code, its hooks run) or a compiled form of its forward."""

    prefill: Callable[..., Any]
    decode: Callable[..., Any]


def forwards(model: torch.nn.Module, cuda_graphs: bool, compile: bool) -> Forwards:
    """The prefill's and a decode step's forward for the modes on."""
    kwargs = options(cuda_graphs, compile)
    if not kwargs:
        return Forwards(model, model)
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # before torch 2.6
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    if not cuda_graphs:
        inductor = torch.compile(model.forward, **kwargs)
        return Forwards(inductor, inductor)
    # a graph per window shape, never one over symbolic sizes (recorded again at each size anyway)
    return Forwards(model, torch.compile(model.forward, dynamic=False, **kwargs))


def keep(logits: torch.Tensor, cache: Any, static: bool) -> torch.Tensor:
    """The step's logits, and a growing cache's tensors, copied out of the graphs' pool, which the next replay
    overwrites (a static cache's tensors are its own, written in place at fixed addresses)."""
    if static:
        return logits.clone()
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            value = getattr(layer, name, None)
            if isinstance(value, torch.Tensor):
                setattr(layer, name, value.clone())
    return logits.clone()


def graph_skips() -> int:
    """Compiled graphs torch ran without CUDA graphs (it says why only with TORCH_LOGS=perf_hints): a forward that
    is partly eager code under --cuda-graphs, which the engine's log says once."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])

