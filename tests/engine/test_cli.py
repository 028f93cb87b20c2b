"""Flag parsing, env fallbacks, knob listing."""

from __future__ import annotations

import json

import pytest
from refengine import cli


def _cfg(argv: list[str]):
    parser = cli.build_parser()
    known, unknown = cli.split_unknown(argv)
    ns = parser.parse_args(known)
    return cli.config_from_args(ns), ns, unknown, parser


def test_defaults(monkeypatch) -> None:
    for name in cli.KNOWN_ENV:
        monkeypatch.delenv(name, raising=False)
    cfg, ns, unknown, parser = _cfg([])
    assert not cfg.fused_finalize and cfg.batch_invariant and cfg.indexer_budget == 2048
    assert cfg.topk_tiebreak == "stable" and cfg.moe_backend == "auto" and cfg.resolved_backend == "flashinfer_cutlass"
    assert cfg.autotune_cache_dir is None and ns.port == 8000 and ns.host == "0.0.0.0" and not cfg.prefix_cache
    assert cli.non_default_args(parser, ns) == {} and unknown == []


def test_vllm_style_command_line(monkeypatch) -> None:
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    argv = ["Qwen/Qwen3-30B", "--served-model-name", "q", "--max-model-len", "8192", "--max-num-seqs", "16",
            "--gpu-memory-utilization", "0.85", "--enforce-eager", "--no-enable-prefix-caching", "-tp", "1",
            "--max-num-batched-tokens", "4096", "-q", "fp8", "--trust-remote-code", "--kv-cache-dtype", "auto",
            "--no-enable-flashinfer-autotune", "--moe-backend", "flashinfer_cutlass", "--no-batch-invariant",
            "--frobnicate", "7", "--weird=1"]
    cfg, ns, unknown, parser = _cfg(argv)
    assert cfg.model == "Qwen/Qwen3-30B" and cfg.served_name == "q" and not cfg.batch_invariant
    assert cfg.moe_backend == "flashinfer_cutlass" and not cfg.prefix_cache
    assert ns.ignored[:2] == ["--gpu-memory-utilization 0.85", "--enforce-eager"]  # prefix caching is a switch
    assert "-tp 1" in ns.ignored and "-q fp8" in ns.ignored
    assert unknown == ["--frobnicate", "7", "--weird=1"]
    nd = cli.non_default_args(parser, ns)
    assert nd["model"] == "Qwen/Qwen3-30B" and nd["batch_invariant"] is False and "ignored" not in nd


def test_env_fallbacks(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("REFENGINE_FUSED_FINALIZE", "1")
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
    monkeypatch.setenv("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", str(tmp_path))
    cfg, *_ = _cfg([])
    assert cfg.fused_finalize and not cfg.batch_invariant and cfg.autotune_cache_dir == str(tmp_path)
    cfg, *_ = _cfg(["--no-fused-finalize", "--batch-invariant", "--autotune-cache-dir", "/x"])
    assert not cfg.fused_finalize and cfg.batch_invariant and cfg.autotune_cache_dir == "/x"


def test_list_knobs(capsys) -> None:
    assert cli.main(["--list-knobs"]) == 0
    knobs = json.loads(capsys.readouterr().out)
    for flag in ("--fused-finalize", "--no-fused-finalize", "--batch-invariant", "--indexer-budget",
                 "--topk-tiebreak", "--moe-backend", "--autotune-cache-dir", "--autotune-legacy-key",
                 "--gpu-memory-utilization", "--enforce-eager", "-tp"):
        assert flag in knobs["flags"]
    assert set(knobs["env"]) == set(cli.KNOWN_ENV)


def test_bad_choice_is_rejected() -> None:
    with pytest.raises(SystemExit):
        _cfg(["--moe-backend", "marlin"])


def test_deterministic_turns_invariance_on_and_widens_the_batch_window(monkeypatch) -> None:
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
    plain, _, _, _ = _cfg([])
    assert (plain.batch_invariant, plain.batch_window_ms, plain.deterministic) == (False, 20.0, False)
    cfg, _, _, _ = _cfg(["--deterministic", "--no-batch-invariant"])
    assert (cfg.batch_invariant, cfg.batch_window_ms, cfg.deterministic) == (True, 50.0, True)
    told, _, _, _ = _cfg(["--deterministic", "--batch-window-ms", "5"])
    assert told.batch_window_ms == 5.0  # a window given is kept


def test_the_orchestrators_profile_knows_the_parsers_defaults() -> None:
    from orchestrator.engines.reference import PROFILE

    defaults = {a.option_strings[0].lstrip("-"): a.default for a in cli.build_parser()._actions if a.option_strings}
    known = {**PROFILE.defaults, "max-logprobs": PROFILE.default_max_logprobs}
    assert len(known) > 15
    for flag, value in known.items():
        parsed = defaults[flag] if flag != "batch-invariant" else True  # None there: on, unless its env says off
        assert parsed == value or (flag == "fused-finalize" and parsed is None and value is False), flag
