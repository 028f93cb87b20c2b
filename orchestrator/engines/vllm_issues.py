"""The vLLM profile's known issues: defects and absent env vars, each with the versions it affects and its source
(the seed's field notes, or the vLLM and FlashInfer sources read for docs/vllm.md). The table is
docs/vllm.md's "Known issues by version"; keep both the same (tests/unit/test_known_issues.py checks it)."""

from __future__ import annotations

from orchestrator.engines.known_issues import KnownIssue, absent_env

SEED = "the seed's field notes"
FACTS = "vLLM's and FlashInfer's sources (docs/vllm.md)"

KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    # use_fused_finalize exists from FlashInfer 0.6.15 (docs/vllm.md): before it the finalize mode cannot change
    KnownIssue("FlashInfer autotune-key collision", "flashinfer", ">=0.6.15,<0.6.18rc2",
               "the autotune cache key omits the finalize mode, so arms that change it can load each other's "
               "tuned entry; give each arm a fresh VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
               "fixed in flashinfer 0.6.18rc2",
               f"{SEED}: 'an autotune-cache collision on FlashInfer 0.6.17 when changing finalize mode ... the "
               "report identifies the cache-key fix from v0.6.18rc2'"),
    absent_env("VLLM_QSA_EXACT_TOPK", "vllm", "<=0.29.0rc4",
               "no stock vLLM reads it: an image that does carries its own patch",
               f"{SEED}: 'sudodrew checked vllm/envs.py at main and v0.29.0rc4: VLLM_QSA_EXACT_TOPK does not exist "
               "at those references'"),
    absent_env("VLLM_ATTENTION_BACKEND", "vllm", ">=0.15.0", "use --attention-backend (vLLM 0.20.0 and later)",
               f"{FACTS}: deprecated by vllm PR #26315, removed after v0.14.0 by PR #32812; 0.20.0 and 0.34.0 "
               "ignore it with the unknown-variable warning"),
    *(absent_env(name, "vllm", ">=0.34.0", "use --moe-backend (vLLM 0.20.0 and later)",
                 f"{FACTS}: in vllm/envs.py at 0.11.0 and 0.20.0, gone at 0.34.0")
      for name in ("VLLM_FLASHINFER_MOE_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_USE_FLASHINFER_MOE_FP8")),
    absent_env("VLLM_BATCH_INVARIANT", "vllm", "<=0.11.0", "batch-invariant mode needs vLLM 0.20.0 or later",
               f"{FACTS}: absent from vllm/envs.py at 0.11.0, present at 0.20.0 and 0.34.0"),
    absent_env("VLLM_FLASHINFER_MOE_FUSED_FINALIZE", "vllm", "<=0.34.0",
               "vllm PR #54948 adds it (open when read); a patched image (arms/vllm-nonfused) sets the mode itself",
               f"{FACTS}: in none of vllm/envs.py at 0.11.0, 0.20.0 and 0.34.0"),
)
