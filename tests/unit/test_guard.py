"""The single-variable guard on composed configs and hand-built fingerprints (no engine, no Docker)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator import config, fingerprint, guard
from orchestrator.errors import ConfigError
from orchestrator.runtime.base import ExecResult, ImageInfo


def load(*overrides: str):  # type: ignore[no-untyped-def]
    return config.to_typed(config.compose(list(overrides)))


def fp(**log_facts: str) -> dict[str, Any]:
    """A fingerprint as study.py stores it: reference engine on a CPU, facts of a default arm + overrides."""
    facts = {"engine_version": "0.1.0", "moe_backend": "FLASHINFER_CUTLASS", "moe_backend_requested": "auto",
             "fused_finalize": "off", "batch_invariant": "on", "autotune_key": "aaaa"}
    facts.update(log_facts)
    return {"version": {"version": "0.1.0"}, "image_id": "sha256:img", "log_facts": facts,
            "cell": fingerprint.arm_cell({}, None),
            "probe": {"python": "3.11.2", "cuda": None, "packages": {"refengine": "0.1.0", "torch": "2.13.0+cpu"},
                      "gpu": {"name": None, "capability": None, "driver": None, "count": 0},
                      "env": {"HOSTNAME": "abc123", "PATH": "/usr/bin"}, "errors": {}}}


def pair(result: dict[str, Any], arm: str) -> dict[str, Any]:
    [found] = [p for p in result["pairs"] if p["arm"] == arm]
    return found


def test_flatten_and_differences() -> None:
    leaves = guard.flatten({"engine_args": {"seed": 0, "fused-finalize": True}, "env": {}, "command": ["a"]})
    assert leaves == {"engine_args.seed": 0, "engine_args.fused-finalize": True, "command": ["a"]}
    assert guard.differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == {"b": [2, guard.ABSENT], "c": [guard.ABSENT, 3]}


def test_finalize_only_is_single_variable_in_config_and_observed() -> None:
    cfg = load("study=guard_finalize_only")
    declared = guard.enforce_declared(cfg)
    assert pair(declared, "fused")["verdict"] == guard.SINGLE
    assert pair(declared, "fused")["differing"] == {"engine_args.fused-finalize": [guard.ABSENT, True]}
    unfused, fused = fp(), fp(fused_finalize="on", autotune_key="bbbb")
    fused["probe"]["env"]["HOSTNAME"] = "def456"  # differs between any two containers: ignored
    observed = guard.observed_check(cfg, {"unfused": unfused, "fused": fused})
    assert pair(observed, "fused")["verdict"] == guard.SINGLE
    headline = guard.headline({"declared": declared, "observed": observed})
    assert headline.startswith("Single-variable in config and observed")
    assert "fused changes engine_args.fused-finalize" in headline


def test_confounded_config_is_refused_listing_every_differing_leaf() -> None:
    cfg = load("study=guard_finalize_and_pin", "+arms.fused.env.VLLM_BATCH_INVARIANT=0")
    with pytest.raises(ConfigError) as err:
        guard.enforce_declared(cfg)
    text = str(err.value)
    assert "in 3 leaves, 2 beyond its declared variable(s) engine_args.fused-finalize" in text
    assert "engine_args.fused-finalize (<absent> -> true) [declared]" in text
    assert "engine_args.moe-backend (<absent> -> flashinfer_cutlass) [NOT declared]" in text
    assert "env.VLLM_BATCH_INVARIANT (<absent> -> 0) [NOT declared]" in text


def test_allow_confounded_runs_and_the_headline_says_so() -> None:
    cfg = load("study=guard_finalize_and_pin", "study.allow_confounded=true")
    declared = guard.enforce_declared(cfg)
    assert declared["confounded"] and guard.refusal(declared) == []
    assert guard.warnings(declared) == [
        "CONFOUNDED (allowed): arm 'fused' also differs in engine_args.moe-backend (<absent> -> flashinfer_cutlass)"]
    lines = guard.markdown_section({"declared": declared})
    assert lines[0].startswith("**CONFOUNDED**: fused vs unfused in config: engine_args.moe-backend")


def test_derived_cache_key_is_confounded_unless_its_implication_is_declared() -> None:
    cfg = load("study=guard_derived_key")
    assert pair(guard.enforce_declared(cfg), "pinned")["verdict"] == guard.SINGLE
    prints = {"auto": fp(), "pinned": fp(moe_backend_requested="flashinfer_cutlass", autotune_key="bbbb")}
    observed = pair(guard.observed_check(cfg, prints), "pinned")
    assert observed["verdict"] == guard.CONFOUNDED
    assert observed["extra"] == ["log_facts.autotune_key"]  # moe_backend_requested is a default implication
    cfg.study.implications["engine_args.moe-backend"].append("log_facts.autotune_key")
    assert pair(guard.observed_check(cfg, prints), "pinned")["verdict"] == guard.SINGLE


def test_backend_pin_preset_declares_the_implication() -> None:
    cfg = load("study=backend_pin")
    prints = {"auto": fp(), "pinned": fp(moe_backend_requested="flashinfer_cutlass", autotune_key="bbbb")}
    assert pair(guard.observed_check(cfg, prints), "pinned")["verdict"] == guard.SINGLE


def test_image_change_implies_everything_inside_it() -> None:
    cfg = load("study=guard_finalize_only", "arms.fused.image=other:1", "study.variables.fused=[image]",
               "arms.fused.engine_args.fused-finalize=null")
    other = fp()
    other["image_id"], other["probe"]["packages"]["torch"] = "sha256:other", "2.14.0"
    assert pair(guard.observed_check(cfg, {"unfused": fp(), "fused": other}), "fused")["verdict"] == guard.SINGLE


def test_unreadable_fields_make_the_pair_unknown() -> None:
    cfg = load("study=guard_finalize_only")
    broken = fp(fused_finalize="on", autotune_key="bbbb")
    broken["probe"] = {"error": "python3: exit 126: executable file not found"}
    observed = pair(guard.observed_check(cfg, {"unfused": fp(), "fused": broken}), "fused")
    assert observed["verdict"] == guard.UNKNOWN
    assert any("probe in fused: python3: exit 126" in u for u in observed["unknown"])
    gpu = fp(fused_finalize="on", autotune_key="bbbb")
    gpu["probe"]["gpu"]["driver"] = "590.48.01"
    observed = pair(guard.observed_check(cfg, {"unfused": fp(), "fused": gpu}), "fused")
    assert observed["verdict"] == guard.UNKNOWN and observed["unknown"] == ["gpu.driver (read in one arm only)"]
    failed = pair(guard.observed_check(cfg, {"unfused": fp(), "fused": None}), "fused")
    assert failed["verdict"] == guard.UNKNOWN and "fingerprint of fused" in failed["unknown"][0]
    assert "observed check incomplete (unknown)" in guard.headline(
        {"declared": guard.declared_check(cfg), "observed": {"baseline": "unfused", "pairs": [failed]}})


def test_observed_difference_beyond_the_variable_is_confounded() -> None:
    cfg = load("study=guard_finalize_only")
    other = fp(fused_finalize="on", autotune_key="bbbb")
    other["probe"]["packages"]["torch"] = "2.14.0"
    observed = pair(guard.observed_check(cfg, {"unfused": fp(), "fused": other}), "fused")
    assert observed["verdict"] == guard.CONFOUNDED and observed["extra"] == ["packages.torch"]


def test_misspelled_variable_gets_the_closest_leaf() -> None:
    cfg = load("study=guard_finalize_only", "study.variables.fused=[engine_args.fused-finalise]")
    with pytest.raises(ConfigError, match=r"Did you mean 'engine_args\.fused-finalize'"):
        guard.declared_check(cfg)
    cfg = load("study=guard_finalize_only")
    cfg.study.variables = {"fusd": ["engine_args.fused-finalize"]}
    with pytest.raises(ConfigError, match=r"arm 'fused' declares no variable.*names 'fusd'.*a typo\?"):
        guard.declared_check(cfg)


def test_variables_of_a_removed_arm_are_ignored() -> None:
    declared = guard.enforce_declared(load("~arms.wide_batch"))
    assert declared["pairs"] == [] and declared["not_in_study"] == ["wide_batch"]


def test_undeclared_arm_in_a_declaring_study_is_an_error() -> None:
    cfg = load("study=guard_finalize_only", "+arm@arms.third=reference")
    with pytest.raises(ConfigError, match="arm 'third' declares no variable"):
        guard.declared_check(cfg)


def test_study_without_variables_is_not_checked() -> None:
    cfg = load("study=guard_finalize_only")
    cfg.study.variables = {}
    declared = guard.enforce_declared(cfg)
    assert not declared["checked"] and pair(declared, "fused")["verdict"] == guard.UNDECLARED
    assert guard.headline({"declared": declared}).startswith("Single-variable check: not declared")


def test_shared_cache_across_finalize_modes_is_flagged() -> None:
    [cache] = guard.declared_check(load("study=guard_shared_cache"))["shared_caches"]
    assert cache["flagged"] and cache["dir"] == "scratch/shared/autotune"
    assert cache["differing"] == {"engine_args.fused-finalize": {"unfused": guard.ABSENT, "fused": True}}
    [cold] = guard.declared_check(load("study=autotune_cold"))["shared_caches"]
    assert not cold["flagged"]  # same finalize mode and backend: sharing is the point
    assert guard.declared_check(load("study=guard_finalize_only"))["shared_caches"] == []  # fresh dirs
    lines = guard.markdown_section({"declared": guard.declared_check(load("study=guard_shared_cache"))})
    assert any(line.startswith("- **Shared cache flagged**: scratch/shared/autotune") for line in lines)


KNOWN = {"flags": ["--fused-finalize", "--no-fused-finalize", "--seed", "--max-num-seqs", "--max-model-len",
                   "--served-model-name", "--moe-backend"],
         "env": ["REFENGINE_FUSED_FINALIZE", "VLLM_BATCH_INVARIANT", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"]}


def test_unknown_knobs_name_the_closest_known_one() -> None:
    cfg = load("study=guard_finalize_only", "+arms.fused.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS=/x",
               "+arms.fused.engine_args.fused-finalise=true", "+arms.fused.env.HF_HOME=/hf")
    problems = guard.unknown_knobs("fused", cfg.arms["fused"], KNOWN)
    assert len(problems) == 2  # HF_HOME is outside the checked prefixes
    assert "flag --fused-finalise is not known" in problems[0] and "Did you mean '--fused-finalize'?" in problems[0]
    assert "env VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS" in problems[1]
    assert "Did you mean 'VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR'?" in problems[1]
    assert guard.arm_flags({"fused-finalize": False, "seed": 0, "x": None}) == ["--no-fused-finalize", "--seed"]


class FakeRuntime:
    def __init__(self, output: str) -> None:
        self.output, self.calls = output, []  # type: ignore[var-annotated]

    def resolve_image(self, ref: str, build: Any) -> ImageInfo:
        return ImageInfo(ref=ref, id="sha256:img")

    def run_oneshot(self, image: str, command: list[str], labels: Any, entrypoint: Any = None,
                    timeout_s: float = 120.0) -> ExecResult:
        self.calls.append((image, command, dict(labels)))
        return ExecResult(0, "some log line\n" + self.output)


def test_check_knobs_lists_once_per_image_and_refuses_unknown_names() -> None:
    import json

    cfg = load("study=guard_finalize_only", "+arms.fused.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS=/x")
    runtime = FakeRuntime(json.dumps(KNOWN))
    knobs = guard.check_knobs(cfg, runtime, "run-1")  # type: ignore[arg-type]
    assert len(runtime.calls) == 1 and runtime.calls[0][1] == ["--list-knobs"]
    assert runtime.calls[0][2]["org.orchestrator.run"] == "run-1"
    assert knobs["unfused"]["checked"] and knobs["unfused"]["unknown"] == []
    problems = guard.knob_refusal(cfg, knobs)
    assert "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS" in problems[0] and "allow_unknown_knobs" in problems[-1]
    cfg.study.allow_unknown_knobs = True
    assert guard.knob_refusal(cfg, knobs) == []
    cfg.arms["fused"].knobs.command = None
    assert guard.check_knobs(cfg, runtime, "run-1")["fused"]["checked"] is False  # type: ignore[arg-type]


def test_matrix_key_covers_the_cell_fields_and_not_the_env() -> None:
    base = fp()
    same = copy.deepcopy(base)
    same["probe"]["env"]["HOSTNAME"], same["log_facts"]["autotune_key"] = "zzz", "cccc"
    assert fingerprint.matrix_key("sha256:img", base) == fingerprint.matrix_key("sha256:img", same)
    for change in ({"driver": "590.48.01"}, {"capability": "12.0"}, {"name": "NVIDIA H200"}):
        other = copy.deepcopy(base)
        other["probe"]["gpu"].update(change)
        assert fingerprint.matrix_key("sha256:img", other) != fingerprint.matrix_key("sha256:img", base)
    tp2 = copy.deepcopy(base)
    tp2["cell"] = fingerprint.arm_cell({"tensor-parallel-size": 2, "quantization": "fp8"}, "0,1")
    assert fingerprint.matrix_key("sha256:img", tp2) != fingerprint.matrix_key("sha256:img", base)
    assert fingerprint.matrix_key("sha256:other", base) != fingerprint.matrix_key("sha256:img", base)


def test_parse_probe_takes_the_last_json_line_and_never_raises() -> None:
    assert fingerprint.parse_probe('warning: x\n{"python": "3.11"}\n') == {"python": "3.11"}
    assert "printed no JSON" in fingerprint.parse_probe("Traceback ...")["error"]


def test_host_fingerprint_runs_the_probe_without_env() -> None:
    result = fingerprint.fingerprint_target()
    probe = result["fingerprint"]["probe"]
    assert "env" not in probe and probe["python"] and len(result["matrix_key"]) == 12
    assert "matrix key" in fingerprint.render(result)
