"""Hugging Face Transformers' own OpenAI-compatible server, `transformers serve` (docs/transformers.md).

What it exposes, as measured (5.25.0 on the CPU, 5.17.0 on an H200): /health, /v1/models, /v1/completions
and /v1/chat/completions; no /metrics (co-residency and capacity are not observable), no logprobs or
top_logprobs (ignored, with a log line), no token ids (cells are signed on their text). The model is a
positional argument (FORCE_MODEL): preloaded, every request pinned to it under its path as the id, so its
arms send no `model` field (served_model_name: null). Its version comes from the environment probe and
the knob listing: its log states none. Both /v1/completions and /v1/chat/completions stream (server-sent
events of text deltas, a usage event under stream_options.include_usage, no `data: [DONE]`: engines/stream.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from orchestrator.engines.profile import Capabilities, Endpoints, EngineProfile
from orchestrator.engines.switches import Switch

# engine_args key rendered as the positional FORCE_MODEL, first (the serve command's one argument).
MODEL_ARG = "model"


@dataclasses.dataclass(frozen=True)
class TransformersServeProfile(EngineProfile):
    def argv(self, engine_args: Mapping[str, Any]) -> list[str]:
        """{model: /models/m, device: cpu} -> ['/models/m', '--device', 'cpu']."""
        model = engine_args.get(MODEL_ARG)
        flags = super().argv({k: v for k, v in engine_args.items() if k != MODEL_ARG})
        return [str(model), *flags] if model is not None else flags

    def flag_names(self, engine_args: Mapping[str, Any]) -> list[str]:
        return super().flag_names({k: v for k, v in engine_args.items() if k != MODEL_ARG})


PROFILE = TransformersServeProfile(
    name="transformers_serve",
    description="Hugging Face transformers serve (OpenAI-compatible; continuous batching optional)",
    endpoints=Endpoints(),  # health, completions, chat, models; no tokenize, version or metrics
    names_model=False,  # FORCE_MODEL: every request pinned to the model it loaded
    # Logprobs ignored, no token ids, no metrics, no trace; both endpoints stream (text deltas, no [DONE]).
    capabilities=Capabilities(streaming=True),
    # cb-use-cuda-graph: CUDA graphs of continuous batching's own forward. Its --compile generates with a static cache
    # and generate's own torch.compile, whose default mode is reduce-overhead (Inductor in CUDA graphs) on a GPU:
    # it moves both (transformers' CompileConfig), so no setting is that flag alone
    settings={"attention_backend": "attn-implementation", "continuous_batching": "continuous-batching",
              "cuda_graphs": "cb-use-cuda-graph", "quantization": "quantization"},
    coupled={"compile": ("cuda_graphs", "compile")},
    knob_probe="transformers_knobs",  # the serve command's own click parameters
    env_prefixes=(),  # it documents no env names of its own: none is checked
    log_patterns={
        "loaded_model": r"\[transformers\] Loading (\S+)",
        "ignored_fields": r"Ignoring unsupported fields in the request: (\{[^}]*\})",
    },
    packages=("transformers",),
    # triage's A/B (engines/switches.py): continuous batching off, requests generated one at a time
    switches=(Switch("continuous_batching", "engine_args.continuous-batching", False, False,
                     "continuous batching: requests join and leave a running batch, so each step's batch shape and "
                     "the kernels' splits change with what else runs",
                     "requests generated one at a time: throughput"),),
    modules=("transformers",),
    programs=("transformers",),  # `transformers serve`
)
