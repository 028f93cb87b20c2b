"""vLLM's OpenAI-compatible server (GPU images and the CPU build). Its startup lines, request fields and
metrics: docs/vllm.md ("vLLM facts the code relies on")."""

from __future__ import annotations

from orchestrator.engines.dialect import Dialect, int64
from orchestrator.engines.profile import Capabilities, Endpoints, EngineProfile

# vLLM's startup lines; the reference engine prints the same ones (engines/reference.py shares them).
LOG_PATTERNS: dict[str, str] = {
    # vLLM's plain line, the logo banner's "█  version 0.32.0", the engine core's "(v0.32.0)", ours
    "engine_version": r"(?:vLLM server version |refengine version |█ +version |LLM engine \(v)([0-9][^,\s)]*)",
    "moe_backend": r"Using '?(.+?)'? (?:Unquantized|Fp8|NvFp4|Mxfp4|Mxfp8|Int8|WNA16) MoE (?:LoRA )?backend",
    "moe_backend_requested": r"MoE backend requested: (\S+)",
    "attention_backend": r"Using (\S+) attention backend",
    "fused_finalize": r"Fused finalize: (on|off)",
    "finalize_patch": r"Non-fused finalize patch active: (use_fused_finalize=False)",  # arms/vllm-nonfused
    "batch_invariant": r"Batch invariant: (on|off)",
    "indexer_budget": r"Indexer budget: (\d+)",
    "topk_tiebreak": r"top-k tie-break: (\w+)",
    "router_tie_share": r"Router tie share: (\S+)",  # the reference engine's router ties (--router-tie-share)
    "autotune_key": r"Autotune cache key: (\S+)",
    "autotune_file": r"Using FlashInfer autotune cache file: (\S+?)\.?(?:\s|$)",
    "autotune_entry_finalize": r"Loaded autotune entry tuned for finalize=(\w+)",
    "max_model_len": r"Using max model len (\d+)",
    "speculative": r"speculative_config=(None|\w+\([^)]*\))",  # vLLM's engine config line; None: off
}



class VllmDialect(Dialect):
    """With return_tokens_as_token_ids vLLM names tokens "token_id:<id>": the ids where its answer carries no
    `token_ids` (a vLLM before 0.10.2)."""

    def token_id(self, token: str) -> int | None:
        if token.startswith("token_id:") and token[9:].lstrip("-").isdigit():
            try:
                return int64(token[9:])
            except TypeError:
                return None
        return None


ENDPOINTS = Endpoints(tokenize="/tokenize", version="/version", metrics="/metrics")
CAPABILITIES = Capabilities(logprobs=True, token_ids=True, tokenize=True, metrics=True, streaming=True)
SETTINGS: dict[str, str] = {
    "max_batch": "max-num-seqs", "attention_backend": "attention-backend",
    "prefix_cache": "enable-prefix-caching", "graphs": "enforce-eager", "compile": "compilation-config",
    "quantization": "quantization", "tensor_parallel": "tensor-parallel-size",
    "pipeline_parallel": "pipeline-parallel-size", "data_parallel": "data-parallel-size",
}
FLAG_ALIASES = {"tensor-parallel-size": ("tp",), "pipeline-parallel-size": ("pp",), "data-parallel-size": ("dp",),
                "quantization": ("q",)}
CACHE_ARGS = {"download-dir": "hugging_face"}
CACHE_ENV = {"VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "autotune", "VLLM_CACHE_ROOT": "vllm"}

PROFILE = EngineProfile(
    name="vllm",
    description="vLLM's OpenAI-compatible server (vllm serve, vllm.entrypoints.openai.api_server)",
    endpoints=ENDPOINTS,
    dialect=VllmDialect(),
    capabilities=CAPABILITIES,
    settings=SETTINGS,
    flag_aliases=FLAG_ALIASES,
    knob_probe="vllm_knobs",
    env_prefixes=("VLLM_",),
    cache_args=CACHE_ARGS,
    cache_env=CACHE_ENV,
    # Token ids in every answer, and top-logprob keys as token ids: keyed by decoded string, tokens that
    # decode alike collapse. A vLLM before 0.10.2 ignores return_token_ids (with a warning); the ids then
    # come from the "token_id:<id>" names (docs/vllm.md).
    request_extra={"return_token_ids": True, "return_tokens_as_token_ids": True},
    log_patterns=LOG_PATTERNS,
    running_metric="vllm:num_requests_running",
    max_logprobs_flag="max-logprobs",
    default_max_logprobs=20,
    packages=("vllm",),
    modules=("vllm",),
    programs=("vllm",),
)
