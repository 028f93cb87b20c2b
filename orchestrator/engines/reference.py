"""The project's reference engine (arms/reference-engine): it accepts vLLM's flags, prints vLLM's startup
lines and serves vLLM's endpoints and metrics, plus its own knobs; it lists them itself (`--list-knobs`).
Each answer carries its `engine_trace`: when the request was complete there and the engine steps it ran in
(a streamed answer on its last event); it streams /v1/completions one event per token as sampled."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from orchestrator.engines import vllm
from orchestrator.engines.dialect import ParsedCompletion, int64
from orchestrator.engines.switches import Switch

# The path it takes, beside vLLM's lines it prints (arms/reference-engine/refengine/paths.py): its router and
# that router's top-k kernel, its indexer's top-k kernel, its linear layers' reduction path
PATH_PATTERNS: dict[str, str] = {
    "router": r"MoE router: (\w+)",
    "router_topk": r"MoE router: \w+, top-k kernel: ([\w.]+)",
    "indexer_topk": r"Indexer top-k kernel: (\w+)",
    "reduction": r"Reduction path: (\w+)",
}

# Its mechanisms (docs/mechanisms.md) as determinism switches, each with the value that turns it off
SWITCHES = (
    Switch("batch_invariant", "env.VLLM_BATCH_INVARIANT", "1", "1",
           "batch-shape dependent reductions: a request's numerics depend on how many ran beside it",
           "per-sequence linear layers: a batch's rows computed one at a time"),
    Switch("fused_finalize", "engine_args.fused-finalize", False, False,
           "a fused MoE finalize reducing expert outputs in an atomics-like order",
           "the unfused finalize: one more pass over the expert outputs"),
    Switch("topk_tiebreak", "engine_args.topk-tiebreak", "stable", "stable",
           "a top-k breaking ties at the k-th place in an unstable order (above the indexer budget)",
           "a stable sort in the top-k"),
    Switch("prefix_cache", "engine_args.enable-prefix-caching", False, False,
           "a prefix cache serving repeats a cached prefix, prefilled on another path than the first request's",
           "the prompt prefilled whole on every request"),
    Switch("cuda_graphs", "engine_args.cuda-graphs", False, False,
           "graph capture of the decode step with a stale buffer: a replay reads the previous step's tokens",
           "eager decode steps (or --graph-sync-fix: a replay waits for its step's tokens)"),
    Switch("autotune_cache", "env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", None, None,
           "an autotune cache: the first request tunes the kernel, later ones run the tuned tile",
           "no tuned tile (the default tile), or the cache filled before the first measured request"),
)


class TracedDialect(vllm.VllmDialect):
    def trace(self, doc: dict[str, Any], out: ParsedCompletion) -> None:
        trace = doc.get("engine_trace")
        if isinstance(trace, dict):
            with contextlib.suppress(TypeError):  # informative only: a malformed trace is no trace
                arrival, first, last = (int64(trace.get(k)) for k in ("arrival_ns", "first_step", "last_step"))
                out.server_arrival_ns, out.server_steps = arrival, (first, last)


PROFILE = dataclasses.replace(
    vllm.PROFILE,
    name="reference",
    description="the project's reference engine (arms/reference-engine), vLLM's flags and lines mimicked",
    endpoints=dataclasses.replace(vllm.ENDPOINTS, chat=None),  # completions only
    dialect=TracedDialect(),
    capabilities=dataclasses.replace(vllm.CAPABILITIES, trace=True),  # and it streams, as vLLM does
    # its flags of vLLM's (no pipeline or data parallelism, no compilation config), and its simulated graph
    # capture (--cuda-graphs: the seed's stale-step defect, docs/mechanisms.md); its --enforce-eager does nothing
    settings={**{k: v for k, v in vllm.SETTINGS.items() if k not in ("pipeline_parallel", "data_parallel", "compile")},
              "cuda_graphs": "cuda-graphs"},
    coupled={},
    knob_probe=None,  # its templates list knobs with the engine's own --list-knobs
    env_prefixes=("VLLM_", "REFENGINE_"),  # it reads vLLM's names for the mechanisms it models
    cache_args={**vllm.CACHE_ARGS, "autotune-cache-dir": "autotune"},
    request_extra={},  # as before this profile: its templates ask for nothing extra
    reset_prefix_cache_env={},  # its /reset_prefix_cache is always served (0 blocks dropped with the cache off)
    cached_tokens_flag=None,  # its usage always says the prompt tokens its prefix cache served (0 with it off)
    log_patterns={**vllm.LOG_PATTERNS, **PATH_PATTERNS,
                  "decode_defect": r"Planted decode-only defect: (on)",  # --decode-defect
                  "deterministic": r"Deterministic mode: (on)",  # --deterministic
                  "batch_window_ms": r"Batch window: ([0-9.]+) ms"},
    # its parser's defaults (refengine/cli.py; tests/engine/test_cli.py holds them equal)
    defaults={"max-model-len": 8192, "max-num-seqs": 16, "seed": 0, "dtype": "auto",
              "device": "auto", "fused-finalize": False, "batch-invariant": True, "enable-prefix-caching": False,
              "indexer-budget": 2048, "topk-tiebreak": "stable", "router-tie-share": 0, "moe-backend": "auto",
              "autotune-legacy-key": False, "step-delay-ms": 0, "warmup-slow-requests": 0,
              "warmup-delay-ms": 0, "decode-defect": False, "cuda-graphs": False, "graph-sync-fix": False,
              "deterministic": False},
    packages=("refengine",),
    switches=SWITCHES,
    known_issues=(),  # vLLM's defects are not its own: it models them, and reads no such version
    modules=("refengine",),
    programs=(),
)
