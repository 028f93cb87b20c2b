"""--compile and --cuda-graphs: the model's forward through torch.compile, one variable each (both off by default).

compile alone: TorchInductor's kernels, launched one by one (torch.compile's default mode); cuda_graphs alone: the
forward's own kernels captured and replayed as CUDA graphs (the "cudagraphs" backend: no Inductor); both: Inductor's
kernels in CUDA graphs (mode "reduce-overhead"). A captured graph writes its outputs into a pool its next replay
reuses, so the engine copies what it keeps of each step (the logits, the KV cache) out of it (`keep`).

Digests hook every module's call; a compiled forward does not run hooks attached after it was compiled (they
would be silently skipped), so these modes need --no-digests.
"""

from __future__ import annotations

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


def refusal(cuda_graphs: bool, compile: bool, device: torch.device, digests: bool, continuous: bool) -> str | None:
    """Why the modes cannot run here, in one line with the fix; None: they can."""
    if cuda_graphs and device.type != "cuda":
        return (f"--cuda-graphs: CUDA graphs capture CUDA kernels, and this engine runs on {device.type}: drop "
                "--cuda-graphs, or give --device cuda where a GPU is (--compile runs on a CPU too)")
    if (cuda_graphs or compile) and digests:
        flag = "--cuda-graphs" if cuda_graphs else "--compile"
        return (f"{flag}: digests hook every module's call, which a compiled forward skips: add --no-digests "
                "(this arm then serves flagged requests without digests)")
    if (cuda_graphs or compile) and continuous:
        return ("--cuda-graphs and --compile compile the static window's forward; --continuous-batching runs "
                "Transformers' own: drop one")
    return None


def compile_forward(model: torch.nn.Module, cuda_graphs: bool, compile: bool) -> None:
    """Replace the model's forward by its compiled form, where a mode is on."""
    kwargs = options(cuda_graphs, compile)
    if not kwargs:
        return
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # before torch 2.6
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    model.forward = torch.compile(model.forward, **kwargs)  # type: ignore[method-assign]


def keep(logits: torch.Tensor, cache: Any) -> torch.Tensor:
    """The step's logits and KV cache copied out of the graphs' pool, which the next replay overwrites."""
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

