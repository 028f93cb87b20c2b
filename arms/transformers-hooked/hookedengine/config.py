"""The hooked engine's settings: the reference engine's server settings, plus the model's and the hooks'."""

from __future__ import annotations

from dataclasses import dataclass

from refengine.config import EngineConfig


@dataclass
class HookedConfig(EngineConfig):
    attn_implementation: str = "eager"  # eager | sdpa: Transformers' attention implementations
    plant_batch_variant: str | None = None  # a test switch: this Linear's reduction split by the window's size
    digest_head: int = 8  # first values kept per digest
    digests: bool = True  # off: flagged requests are served as any other, with no digests (no hooks ever)
    digest_depth: int = 0  # hooks only on modules whose name has at most this many dotted parts (0: every depth)
    digest_under: str | None = None  # hooks only on this module and the modules inside it (None: the whole model)
    batch_invariant: bool = False  # on: each request of a window runs alone (its rows as if alone)
    invariant_kernels: bool = False  # on: batch-invariant kernels (invariant.py): a batch's rows as if alone
    continuous_batching: bool = False  # on: Transformers' continuous batching (continuous.py), not a static window
    compile: bool = False  # on: torch.compile of the model's forward, Inductor's kernels (compiled.py)
    static_cache: bool = False  # on: the KV cache preallocated at a fixed length (kv.py); --cuda-graphs needs it
    # cuda_graphs, EngineConfig's field: on, the forward captured and replayed as CUDA graphs (compiled.py), with
    # no simulated defect (the reference engine's); graph_sync_fix is the reference engine's only
