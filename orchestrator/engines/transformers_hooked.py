"""The project's hooked engine on Hugging Face Transformers (arms/transformers-hooked, `python -m hookedengine`):
a local model served through Transformers' own modules, behind the reference engine's HTTP server, scheduler,
protocol and streaming. Its answers are the reference engine's (vLLM-shaped completions with logprobs, top-k,
token ids and `engine_trace`; /tokenize, /metrics), so its dialect is the reference engine's. Completions only.
A request flagged `"digest": true` gets forward hooks on every module but the model itself (containers as well
as leaves, hookedengine/digests.py `Recorder`): its own rows' digests per
(step, module call), fetched after each phase (run/send/digests.py, docs/locate.md). It lists its
knobs itself (`--list-knobs`), as the reference engine does."""

from __future__ import annotations

import dataclasses

from orchestrator.engines import reference, vllm
from orchestrator.engines.profile import EngineProfile
from orchestrator.engines.switches import Switch

# Its startup lines: "hookedengine version V, torch T, transformers X, device D, dtype P", "Model M, max model
# len N", "Batch invariant: on|off", "Batch invariant kernels: on|off", "Attention implementation: eager|invariant"
# (model.config._attn_implementation, as Transformers resolved it), "Planted batch-variant module: NAME|none",
# "KV cache: static|dynamic".
LOG_PATTERNS: dict[str, str] = {
    "engine_version": r"hookedengine version ([0-9][^,\s]*)",
    "device": r"hookedengine version .*, device (\w+)",
    "dtype": r"hookedengine version .*, dtype (\w+)",
    "max_model_len": r"Model \S+, max model len (\d+)",
    "batch_invariant": r"Batch invariant: (on|off)",
    "invariant_kernels": r"Batch invariant kernels: (on|off)",
    "attention_backend": r"Attention implementation: (\S+)",
    # Transformers' continuous batching runs its own (paged) attention: "Continuous batching runs attention X, ..."
    "cb_attention": r"Continuous batching runs attention ([^,\s]+)",
    "planted_module": r"Planted batch-variant module: (\S+)",
    "kv_cache": r"KV cache: (static|dynamic)",
}

PROFILE = EngineProfile(
    name="transformers_hooked",
    description="the project's hooked Transformers engine (arms/transformers-hooked): per-module digests",
    # no prefix cache: no reset route, no prefix_cache setting (every prompt prefilled whole)
    endpoints=dataclasses.replace(vllm.ENDPOINTS, chat=None, digests="/v1/digests/{request_id}",
                                  reset_prefix_cache=None),
    dialect=reference.TracedDialect(),
    capabilities=dataclasses.replace(vllm.CAPABILITIES, trace=True, digests=True),
    settings={"max_batch": "max-num-seqs", "attention_backend": "attn-implementation",
              "continuous_batching": "continuous-batching", "cuda_graphs": "cuda-graphs", "compile": "compile"},
    knob_probe=None,  # its templates list knobs with the engine's own --list-knobs
    env_prefixes=(),  # it reads no env names of its own: none is checked
    # Token ids in every answer, top-logprob keys as token ids (the reference engine's protocol, vLLM's fields)
    request_extra=vllm.PROFILE.request_extra,
    log_patterns=LOG_PATTERNS,
    running_metric=vllm.PROFILE.running_metric,  # the reference engine's /metrics, vLLM's names
    max_logprobs_flag="max-logprobs",
    default_max_logprobs=20,
    digests_flag="digests",
    digest_capacity=512,  # hookedengine/digests.py STORE_REQUESTS
    digest_scope_flags=("digest-depth", "digest-under"),
    packages=("transformers", "hookedengine"),  # torch is under every engine (guard/fingerprint.py)
    switches=(  # triage's A/Bs (engines/switches.py), hookedengine/cli.py's flags
        Switch("continuous_batching", "engine_args.continuous-batching", False, False,
               "Transformers' continuous batching: packed forwards whose shape changes with what else runs",
               "the static batch window"),
        Switch("cuda_graphs", "engine_args.cuda-graphs", False, False, "the forward captured and replayed as CUDA "
               "graphs", "eager forwards"),
        Switch("compile", "engine_args.compile", False, False, "torch.compile of the forward (Inductor's kernels)",
               "eager kernels"),
        Switch("batch_invariant", "engine_args.batch-invariant", True, False, "batch-shape dependent reductions: a "
               "request's rows depend on the others in its window", "each request of a window run alone"),
    ),
    modules=("hookedengine",),
    programs=(),
)
