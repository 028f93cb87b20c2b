"""vLLM's OpenAI-compatible server (GPU images and the CPU build). Its startup lines, request fields and
metrics: docs/vllm.md ("vLLM facts the code relies on")."""

from __future__ import annotations

from orchestrator.engines.dialect import Dialect, int64
from orchestrator.engines.profile import Capabilities, Endpoints, EngineProfile
from orchestrator.engines.vllm_issues import KNOWN_ISSUES

# vLLM's startup lines; the reference engine prints the same ones (engines/reference.py shares them).
LOG_PATTERNS: dict[str, str] = {
    # vLLM's plain line, the logo banner's "█  version 0.32.0", the engine core's "(v0.32.0)", ours
    "engine_version": r"(?:vLLM server version |refengine version |█ +version |LLM engine \(v)([0-9][^,\s)]*)",
    "moe_backend": r"Using '?(.+?)'? (?:Unquantized|Fp8|NvFp4|Mxfp4|Mxfp8|Int8|WNA16) MoE (?:LoRA )?backend",
    "moe_backend_requested": r"MoE backend requested: (\S+)",
    # the attention backend: 0.20.0 and later "Using FLASH_ATTN attention backend out of potential backends: [...]",
    # forced "Using AttentionBackendEnum.FLASH_ATTN backend.", MLA on CPU "Using CPU_MLA backend.", 0.11.0 "Using
    # Flash Attention backend on V1 engine."; the CPU build's own CPU_ATTN is selected without a line (0.32.0
    # platforms/cpu.py): on it the fact is absent, never guessed
    "attention_backend": r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]*|Flash Attention|Torch SDPA|FlashInfer"
                         r"|XFormers)(?: attention)? backend(?: out of|\.| on )",
    # the fused MoE kernel's classes (0.32.0 fused_moe/oracle/*.py): "Using TritonExperts MoE backend",
    # "Using MoEPrepareAndFinalizeNoDPEPModular". The router (FusedTopKRouter, GroupedTopKRouter, ...) and its
    # top-k kernel (topk_softmax) are chosen without a line (fused_moe/router/, 0.32.0): no fact reads them
    "moe_experts": r"Using (\w+) MoE backend\.?\s*$",
    "moe_prepare_finalize": r"Using (\w*PrepareAndFinalize\w*)\.?\s*$",
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
    # vLLM's engine config line (True/False); the reference engine's own line (on/off)
    "prefix_cache": r"(?:enable_prefix_caching=|Prefix caching: )(True|False|on|off)\b",
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


ENDPOINTS = Endpoints(tokenize="/tokenize", version="/version", metrics="/metrics",
                      reset_prefix_cache="/reset_prefix_cache")
CAPABILITIES = Capabilities(logprobs=True, token_ids=True, tokenize=True, metrics=True, streaming=True,
                            prompt_logprobs=True)
SETTINGS: dict[str, str] = {
    "max_batch": "max-num-seqs", "attention_backend": "attention-backend",
    "prefix_cache": "enable-prefix-caching",
    # one key each of --compilation-config; --enforce-eager moves both (COUPLED; docs/vllm.md)
    "cuda_graphs": "compilation-config.cudagraph_mode", "compile": "compilation-config.mode",
    "quantization": "quantization", "tensor_parallel": "tensor-parallel-size",
    "pipeline_parallel": "pipeline-parallel-size", "data_parallel": "data-parallel-size",
}
# vLLM's VllmConfig.__post_init__ (vllm/config/vllm.py): "Enforce eager set, disabling torch.compile and
# CUDAGraphs. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none"; -O0 sets both to none too.
COUPLED = {"enforce-eager": ("cuda_graphs", "compile"), "optimization-level": ("cuda_graphs", "compile")}
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
    coupled=COUPLED,
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
    # vLLM's EngineArgs (vllm/engine/arg_utils.py), the few stable across its versions
    defaults={"dtype": "auto", "enforce-eager": False, "trust-remote-code": False},
    max_logprobs_flag="max-logprobs",
    default_max_logprobs=20,
    # its /reset_prefix_cache is served only in its dev mode (vllm/entrypoints: VLLM_SERVER_DEV_MODE)
    reset_prefix_cache_env={"VLLM_SERVER_DEV_MODE": "1"},
    cached_tokens_flag="enable-prompt-tokens-details",
    packages=("vllm",),
    known_issues=KNOWN_ISSUES,  # engines/vllm_issues.py
    modules=("vllm",),
    programs=("vllm",),
)
