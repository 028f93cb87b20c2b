"""The single-variable guard on composed configs and hand-built fingerprints (no engine, no Docker)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from orchestrator import config
from orchestrator.config.arms import runtime_for
from orchestrator.config.schema import RuntimeConfig
from orchestrator.engines import profile_for
from orchestrator.errors import ConfigError
from orchestrator.guard import caches, fingerprint, results
from orchestrator.guard import declared as guard_declared
from orchestrator.guard import knobs as guard_knobs
from orchestrator.guard import leaves as guard_leaves
from orchestrator.guard import observed as guard_observed
from orchestrator.guard.results import GuardResult
from orchestrator.report import guard as guard_report
from orchestrator.runtime.fake import FakeRuntime
from orchestrator.runtime.spec import ExecResult
from tests.fake_engine import engine


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


def pair(result: Any, arm: str) -> Any:
    [found] = [p for p in result.pairs if p.arm == arm]
    return found


def test_flatten_and_differences() -> None:
    leaves = guard_leaves.flatten({"engine_args": {"seed": 0, "fused-finalize": True}, "env": {}, "command": ["a"]})
    assert leaves == {"engine_args.seed": 0, "engine_args.fused-finalize": True, "command": ["a"]}
    absent = results.ABSENT
    assert guard_leaves.differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == {"b": [2, absent], "c": [absent, 3]}


def test_finalize_only_is_single_variable_in_config_and_observed() -> None:
    cfg = load("study=guard_finalize_only")
    declared = guard_declared.enforce_declared(cfg)
    assert pair(declared, "fused").verdict == results.SINGLE
    assert pair(declared, "fused").differing == {"engine_args.fused-finalize": [results.ABSENT, True]}
    unfused, fused = fp(), fp(fused_finalize="on", autotune_key="bbbb")
    fused["probe"]["env"]["HOSTNAME"] = "def456"  # differs between any two containers: ignored
    observed = guard_observed.observed_check(cfg, {"unfused": unfused, "fused": fused})
    assert pair(observed, "fused").verdict == results.SINGLE
    headline = guard_report.headline(GuardResult(declared=declared, observed=observed))
    assert headline.startswith("Single-variable in config and observed")
    assert "fused changes engine_args.fused-finalize" in headline


def test_confounded_config_is_refused_listing_every_differing_leaf() -> None:
    cfg = load("study=guard_finalize_and_pin", "+arms.fused.env.VLLM_BATCH_INVARIANT=0")
    with pytest.raises(ConfigError) as err:
        guard_declared.enforce_declared(cfg)
    text = str(err.value)
    assert "in 3 leaves, 2 beyond its declared variable(s) engine_args.fused-finalize" in text
    assert "engine_args.fused-finalize (<absent> -> true) [declared]" in text
    assert "engine_args.moe-backend (<absent> -> flashinfer_cutlass) [NOT declared]" in text
    assert "env.VLLM_BATCH_INVARIANT (<absent> -> 0) [NOT declared]" in text


def test_allow_confounded_runs_and_the_headline_says_so() -> None:
    cfg = load("study=guard_finalize_and_pin", "study.allow_confounded=true")
    declared = guard_declared.enforce_declared(cfg)
    assert declared.confounded and guard_declared.refusal(declared) == []
    assert guard_declared.warnings(declared) == [
        "CONFOUNDED (allowed): arm 'fused' also differs in engine_args.moe-backend (<absent> -> flashinfer_cutlass)"]
    lines = guard_report.markdown_section(GuardResult(declared=declared))
    assert lines[0].startswith("**CONFOUNDED**: fused vs unfused in config: engine_args.moe-backend")


def test_derived_cache_key_is_confounded_unless_its_implication_is_declared() -> None:
    cfg = load("study=guard_derived_key")
    assert pair(guard_declared.enforce_declared(cfg), "pinned").verdict == results.SINGLE
    prints = {"auto": fp(), "pinned": fp(moe_backend_requested="flashinfer_cutlass", autotune_key="bbbb")}
    observed = pair(guard_observed.observed_check(cfg, prints), "pinned")
    assert observed.verdict == results.CONFOUNDED
    assert observed.extra == ["log_facts.autotune_key"]  # moe_backend_requested is a default implication
    cfg.study.implications["engine_args.moe-backend"].append("log_facts.autotune_key")
    assert pair(guard_observed.observed_check(cfg, prints), "pinned").verdict == results.SINGLE


def test_backend_pin_preset_declares_the_implication() -> None:
    cfg = load("study=backend_pin")
    prints = {"auto": fp(), "pinned": fp(moe_backend_requested="flashinfer_cutlass", autotune_key="bbbb")}
    assert pair(guard_observed.observed_check(cfg, prints), "pinned").verdict == results.SINGLE


def test_image_change_implies_everything_inside_it() -> None:
    cfg = load("study=guard_finalize_only", "arms.fused.image=other:1", "study.variables.fused=[image]",
               "arms.fused.engine_args.fused-finalize=null")
    other = fp()
    other["image_id"], other["probe"]["packages"]["torch"] = "sha256:other", "2.14.0"
    observed = guard_observed.observed_check(cfg, {"unfused": fp(), "fused": other})
    assert pair(observed, "fused").verdict == results.SINGLE


def image_ab(*overrides: str):  # type: ignore[no-untyped-def]
    """An A/B whose declared variable is the image (everything inside it may differ), holding two log facts."""
    return load("study=guard_finalize_only", "arms.fused.image=other:1", "study.variables.fused=[image]",
                "~arms.fused.engine_args.fused-finalize", "study.held_facts=[moe_backend,speculative]",
                *overrides)


def test_a_held_fact_that_differs_across_an_image_change_is_an_undeclared_variable() -> None:
    other = fp(moe_backend="TRITON", speculative="None")
    other["image_id"] = "sha256:other"
    observed = pair(guard_observed.observed_check(image_ab(), {"unfused": fp(speculative="None"), "fused": other}),
                    "fused")
    assert observed.verdict == results.CONFOUNDED and observed.extra == ["log_facts.moe_backend"]
    assert observed.differing["log_facts.moe_backend"] == ["FLASHINFER_CUTLASS", "TRITON"]
    headline = guard_report.headline(GuardResult(observed=results.ObservedCheck("unfused", [observed])))
    assert headline == "**CONFOUNDED**: fused vs unfused observed: log_facts.moe_backend (FLASHINFER_CUTLASS -> TRITON)"
    # not held: the image explains it, as before
    loose = pair(guard_observed.observed_check(image_ab("study.held_facts=[]"), {"unfused": fp(), "fused": other}),
                 "fused")
    assert loose.verdict == results.SINGLE


def test_held_facts_that_are_equal_pass_and_unstated_ones_are_not_observed() -> None:
    cfg = image_ab()
    other = fp(speculative="None")
    other["image_id"], other["probe"]["packages"]["torch"] = "sha256:other", "2.14.0"
    observed = pair(guard_observed.observed_check(cfg, {"unfused": fp(speculative="None"), "fused": other}), "fused")
    assert observed.verdict == results.SINGLE and observed.extra == [] and observed.unknown == []
    observed = pair(guard_observed.observed_check(cfg, {"unfused": fp(), "fused": fp()}), "fused")
    assert observed.verdict == results.UNKNOWN  # absent from both logs: equal, yet not a pass
    assert observed.unknown == ["log_facts.speculative (held; not observed in the log of unfused, fused)"]
    observed = pair(guard_observed.observed_check(cfg, {"unfused": fp(speculative="None"), "fused": fp()}), "fused")
    assert observed.unknown == ["log_facts.speculative (held; not observed in the log of fused)"]


def test_an_unknown_held_fact_is_bad_input_listing_the_valid_names() -> None:
    cfg = image_ab("study.held_facts=[moe_backnd]")
    [problem] = guard_declared.problems(cfg)
    assert problem.startswith("study.held_facts='moe_backnd' names nothing that exists. Did you mean 'moe_backend'?")
    assert "Available: " in problem and "attention_backend" in problem and "speculative" in problem
    assert "\n" not in problem


def test_vllm_speculative_config_is_a_log_fact() -> None:
    line = ("(EngineCore pid=1) INFO 05-01 10:00:00 [core.py:93] Initializing a V1 LLM engine (v0.34.0) with config: "
            "model='m', speculative_config={}, tokenizer='m'")
    off = fingerprint.log_facts([line.format("None")])
    on = fingerprint.log_facts([line.format("SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)")])
    assert off["speculative"] == "None"
    assert on["speculative"] == "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)"
    assert off["engine_version"] == "0.34.0"


def test_the_vllm_image_ab_holds_the_seeds_confounders() -> None:
    cfg = load("study=vllm_fused_finalize")
    assert {"moe_backend", "attention_backend", "speculative"} <= set(cfg.study.held_facts)
    assert guard_declared.problems(cfg) == []


def test_unreadable_fields_make_the_pair_unknown() -> None:
    cfg = load("study=guard_finalize_only")
    broken = fp(fused_finalize="on", autotune_key="bbbb")
    broken["probe"] = {"error": "python3: exit 126: executable file not found"}
    observed = pair(guard_observed.observed_check(cfg, {"unfused": fp(), "fused": broken}), "fused")
    assert observed.verdict == results.UNKNOWN
    assert any("probe in fused: python3: exit 126" in u for u in observed.unknown)
    gpu = fp(fused_finalize="on", autotune_key="bbbb")
    gpu["probe"]["gpu"]["driver"] = "590.48.01"
    observed = pair(guard_observed.observed_check(cfg, {"unfused": fp(), "fused": gpu}), "fused")
    assert observed.verdict == results.UNKNOWN and observed.unknown == ["gpu.driver (read in one arm only)"]
    failed = pair(guard_observed.observed_check(cfg, {"unfused": fp(), "fused": None}), "fused")
    assert failed.verdict == results.UNKNOWN and "fingerprint of fused" in failed.unknown[0]
    assert "observed check incomplete (unknown)" in guard_report.headline(
        GuardResult(declared=guard_declared.declared_check(cfg), observed=results.ObservedCheck("unfused", [failed])))


def test_observed_difference_beyond_the_variable_is_confounded() -> None:
    cfg = load("study=guard_finalize_only")
    other = fp(fused_finalize="on", autotune_key="bbbb")
    other["probe"]["packages"]["torch"] = "2.14.0"
    observed = pair(guard_observed.observed_check(cfg, {"unfused": fp(), "fused": other}), "fused")
    assert observed.verdict == results.CONFOUNDED and observed.extra == ["packages.torch"]


def test_misspelled_variable_gets_the_closest_leaf() -> None:
    cfg = load("study=guard_finalize_only", "study.variables.fused=[engine_args.fused-finalise]")
    with pytest.raises(ConfigError, match=r"Did you mean 'engine_args\.fused-finalize'"):
        guard_declared.declared_check(cfg)
    cfg = load("study=guard_finalize_only")
    cfg.study.variables = {"fusd": ["engine_args.fused-finalize"]}
    with pytest.raises(ConfigError, match=r"arm 'fused' declares no variable.*names 'fusd'.*a typo\?"):
        guard_declared.declared_check(cfg)


def test_variables_of_a_removed_arm_are_ignored() -> None:
    declared = guard_declared.enforce_declared(load("~arms.wide_batch"))
    assert declared.pairs == [] and declared.not_in_study == ["wide_batch"]


def test_undeclared_arm_in_a_declaring_study_is_an_error() -> None:
    cfg = load("study=guard_finalize_only", "+arm@arms.third=reference")
    with pytest.raises(ConfigError, match="arm 'third' declares no variable"):
        guard_declared.declared_check(cfg)


def test_study_without_variables_is_not_checked() -> None:
    cfg = load("study=guard_finalize_only")
    cfg.study.variables = {}
    declared = guard_declared.enforce_declared(cfg)
    assert not declared.checked and pair(declared, "fused").verdict == results.UNDECLARED
    assert guard_report.headline(GuardResult(declared=declared)).startswith("Single-variable check: not declared")


def test_a_one_arm_study_says_there_is_nothing_to_compare() -> None:
    alone = results.DeclaredCheck(checked=True, baseline="solo", allow_confounded=False, pairs=[], not_in_study=[],
                                  shared_caches=[])
    assert guard_report.headline(GuardResult(declared=alone)) == \
        "Single-variable check: one arm (solo), nothing to compare it with"


def test_shared_cache_across_finalize_modes_is_flagged() -> None:
    [cache] = guard_declared.declared_check(load("study=guard_shared_cache")).shared_caches
    assert cache.flagged and cache.dir == "scratch/shared/autotune"
    assert cache.differing == {"engine_args.fused-finalize": {"unfused": results.ABSENT, "fused": True}}
    [cold] = guard_declared.declared_check(load("study=autotune_cold")).shared_caches
    assert not cold.flagged  # same finalize mode and backend: sharing is the point
    assert guard_declared.declared_check(load("study=guard_finalize_only")).shared_caches == []  # fresh dirs
    shared = guard_declared.declared_check(load("study=guard_shared_cache"))
    lines = guard_report.markdown_section(GuardResult(declared=shared))
    assert any(line.startswith("- **Shared cache flagged**: scratch/shared/autotune") for line in lines)


KNOWN = {"flags": ["--fused-finalize", "--no-fused-finalize", "--seed", "--max-num-seqs", "--max-model-len",
                   "--served-model-name", "--moe-backend"],
         "env": ["REFENGINE_FUSED_FINALIZE", "VLLM_BATCH_INVARIANT", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"]}


def test_unknown_knobs_name_the_closest_known_one() -> None:
    cfg = load("study=guard_finalize_only", "+arms.fused.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS=/x",
               "+arms.fused.engine_args.fused-finalise=true", "+arms.fused.env.HF_HOME=/hf")
    problems = guard_knobs.unknown_knobs("fused", cfg.arms["fused"], KNOWN)
    assert len(problems) == 2  # HF_HOME is outside the checked prefixes
    assert "flag --fused-finalise is not known" in problems[0] and "Did you mean '--fused-finalize'?" in problems[0]
    assert "env VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS" in problems[1]
    assert "Did you mean 'VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR'?" in problems[1]
    flags = profile_for("reference").flag_names({"fused-finalize": False, "seed": 0, "x": None})
    assert flags == ["--no-fused-finalize", "--seed"]


def test_checked_env_prefixes_come_from_the_engine_profile_unless_the_arm_names_its_own() -> None:
    cfg = load("study=guard_finalize_only", "+arms.fused.env.REFENGINE_TYPO=1", "+arms.fused.env.VLLM_TYPO=1")
    arm = cfg.arms["fused"]
    assert arm.knobs.env_prefixes is None  # the templates leave it to the profile

    def unknown_env() -> list[str]:
        return [p.split("env ")[1].split()[0] for p in guard_knobs.unknown_knobs("fused", arm, KNOWN) if "env " in p]

    assert unknown_env() == ["REFENGINE_TYPO", "VLLM_TYPO"]  # the reference profile checks VLLM_ and REFENGINE_
    arm.engine = "transformers_serve"  # a profile with no env names of its own checks none
    assert unknown_env() == []
    arm.engine, arm.knobs.env_prefixes = "reference", ["REFENGINE_"]  # the arm's own list wins
    assert unknown_env() == ["REFENGINE_TYPO"]


def listing_runtime(output: str) -> tuple[FakeRuntime, list[list[str]]]:
    """The fake runtime with every arm's image present; its one-shot containers print `output`."""
    calls: list[list[str]] = []

    def commands(argv: list[str], env: Any) -> ExecResult:
        calls.append(argv)
        return ExecResult(0, "some log line\n" + output)

    return FakeRuntime({"orchestrator/reference-engine:0.1.0": engine()}, commands), calls


def test_check_knobs_lists_once_per_image_and_refuses_unknown_names() -> None:
    import json

    cfg = load("study=guard_finalize_only", "+arms.fused.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS=/x")
    runtime, calls = listing_runtime(json.dumps(KNOWN))
    listed = guard_knobs.check_knobs(cfg, runtime, "run-1")
    assert calls == [["--list-knobs"]]  # once per image, not once per arm
    assert listed["unfused"].checked and listed["unfused"].unknown == []
    problems = guard_knobs.knob_refusal(cfg, listed)
    assert "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS" in problems[0] and "allow_unknown_knobs" in problems[-1]
    cfg.study.allow_unknown_knobs = True
    assert guard_knobs.knob_refusal(cfg, listed) == []
    cfg.arms["fused"].knobs.command = None
    assert guard_knobs.check_knobs(cfg, runtime, "run-1")["fused"].checked is False


def test_a_flag_value_the_listing_refuses_stops_the_run_even_where_unknown_names_are_allowed() -> None:
    import json

    cfg = load("study=guard_finalize_only", "arms.fused.engine_args.fused-finalize=maybe")
    typed = {**KNOWN, "types": {"--fused-finalize": "switch", "--no-fused-finalize": "switch", "--seed": "int"}}
    runtime, _ = listing_runtime(json.dumps(typed))
    cfg.study.allow_unknown_knobs = True  # a value the engine refuses is no unknown name: it could not start
    [problem] = guard_knobs.knob_refusal(cfg, guard_knobs.check_knobs(cfg, runtime, "run-1"))
    assert problem.startswith("arms.fused.engine_args.fused-finalize='maybe': must be true or false "
                              "(--fused-finalize is a switch of ")
    cfg.arms["fused"].engine_args["fused-finalize"] = True
    assert guard_knobs.knob_refusal(cfg, guard_knobs.check_knobs(cfg, runtime, "run-2")) == []
    cfg.arms["fused"].engine_args["fused-finalize"] = "maybe"
    assert guard_knobs.bad_values("fused", cfg.arms["fused"], KNOWN) == []  # a listing that states no types


def test_an_engine_its_arm_cannot_import_is_refused_as_not_installed() -> None:
    """The listing runs where the arm will: when it cannot import the engine, neither can the arm's start."""
    cfg = load("study=guard_finalize_only")
    for arm in cfg.arms.values():
        arm.engine = "vllm"
    runtime, _ = listing_runtime('{"error": "ModuleNotFoundError: No module named \'vllm\'"}')
    listed = guard_knobs.check_knobs(cfg, runtime, "run-1")
    assert listed["fused"].engine_missing == "vllm" and not listed["fused"].checked
    problems = guard_knobs.knob_refusal(cfg, listed)
    assert len(problems) == 2 and "has no module 'vllm'); install vllm there, or set arms.unfused.image" in problems[0]
    cfg.study.allow_unknown_knobs = True  # not an unknown name: the arm could not start at all
    assert len(guard_knobs.knob_refusal(cfg, listed)) == 2
    other, _ = listing_runtime('{"error": "ModuleNotFoundError: No module named \'numpy\'"}')
    assert guard_knobs.knob_refusal(cfg, guard_knobs.check_knobs(cfg, other, "run-2")) == []  # not the engine


@pytest.mark.parametrize(("command", "refused"), [
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], True), (["/venv/bin/python", "-u", "-m", "vllm"], True),
    (["python3", "-X", "dev", "-m", "vllm.entrypoints.openai.api_server"], True), (["python3", "-m", "myfork"], False),
    (["{bin}/vllm", "serve"], True), (["python3", "my_server.py"], False),
    (["python3", "my_server.py", "-m", "vllm"], False), (["{bin}/my-server"], False)])
def test_the_import_check_holds_only_where_the_command_runs_the_engines_own_module(
        command: list[str], refused: bool, tmp_path: Path) -> None:
    """`python3 -m vllm...` cannot start without vllm; a script of the user's (a fork, a mock) may need none: it
    is not refused, and is told how to declare a server of its own."""
    for program in ("vllm", "my-server"):  # console scripts: their shebang names the arm's interpreter
        (tmp_path / program).write_text("#!/venv/bin/python3\n")
    command = [word.format(bin=tmp_path) for word in command]
    cfg = load("study=guard_finalize_only", "runtime=process")
    for arm in cfg.arms.values():
        arm.engine, arm.command, arm.knobs.command = "vllm", command, None  # the vllm profile's own listing
    runtime, _ = listing_runtime('{"error": "ModuleNotFoundError: No module named \'vllm\'"}')
    listed = guard_knobs.check_knobs(cfg, runtime, "run-1")
    problems = guard_knobs.knob_refusal(cfg, listed)
    assert bool(problems) is refused and (listed["fused"].engine_missing == "vllm") is refused
    if not refused:
        assert listed["fused"].reason == (f"`{' '.join(command)}` runs no module or program of engine vllm, and "
                                          "its listing needs module 'vllm': declare a server of your own with "
                                          "arms.fused.engine=openai (nothing assumed of it; docs/runtimes.md)")
    for arm in cfg.arms.values():
        arm.engine = "openai"  # nothing to import, no listing: never refused
    assert guard_knobs.knob_refusal(cfg, guard_knobs.check_knobs(cfg, runtime, "run-2")) == []


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


def test_probe_result_takes_the_last_json_line_and_never_raises() -> None:
    assert fingerprint.probe_result(ExecResult(0, 'warning: x\n{"python": "3.11"}\nbye\n'), "x") == {"python": "3.11"}
    assert "printed no JSON" in fingerprint.probe_result(ExecResult(0, "Traceback ..."), "x")["error"]
    assert "exit 1" in fingerprint.probe_result(ExecResult(1, '{"python": "3.11"}'), "x")["error"]


def test_host_fingerprint_runs_the_probe_without_env() -> None:
    result = fingerprint.fingerprint_target(runtime_for(RuntimeConfig(kind="process")), None, "fp")
    probe = result["fingerprint"]["probe"]
    assert "env" not in probe and probe["python"] and len(result["matrix_key"]) == 12
    assert "matrix key" in fingerprint.render(result)


# hidden shared caches (guard/caches.py) -------------------------------------------------------------

def test_a_cache_dir_inside_the_container_is_private_until_a_writable_mount_shares_it() -> None:
    env = ["+arms.baseline.env.TRITON_CACHE_DIR=/c/t", "+arms.wide_batch.env.TRITON_CACHE_DIR=/c/t"]
    assert caches.problems(load(*env)) == []  # each container's own filesystem
    mounted = [*env, "arms.baseline.volumes=[{host: /srv/c, container: /c, read_only: false}]",
               "arms.wide_batch.volumes=[{host: /srv/c, container: /c, read_only: false}]"]
    (problem,) = caches.problems(load(*mounted))
    assert "share a cache (mount, triton) at /srv/c" in problem
    read_only = [*env, "arms.baseline.volumes=[{host: /srv/c, container: /c}]",
                 "arms.wide_batch.volumes=[{host: /srv/c, container: /c}]"]
    assert caches.problems(load(*read_only)) == []  # a read-only mount cannot carry one arm's cache to another
    assert caches.problems(load(*mounted, "+study.allow_shared_caches=[triton]")) == []


def test_process_arms_share_what_their_env_names_and_what_they_inherit(monkeypatch: pytest.MonkeyPatch) -> None:
    process = ["runtime=process", "arm@arms.baseline=reference_process", "arm@arms.wide_batch=reference_process"]
    assert caches.problems(load(*process)) == []  # defaults are private (runtime/process.py)
    (problem,) = caches.problems(load(*process, "+arms.baseline.engine_args.download-dir=/models",
                                      "+arms.wide_batch.env.HF_HOME=/models/hub"))
    assert "share a cache (hugging_face) at /models" in problem
    monkeypatch.setenv("HF_HOME", "/srv/hf")
    (problem,) = caches.problems(load(*process, "runtime.inherit_env=[PATH,HF_HOME]"))
    assert "runtime.inherit_env HF_HOME (from this host)" in problem
    monkeypatch.setenv("XDG_CACHE_HOME", "/srv/xdg")  # overridden by the private one: not shared
    assert len(caches.problems(load(*process, "runtime.inherit_env=[PATH,HF_HOME,XDG_CACHE_HOME]"))) == 1


def test_a_declared_share_is_the_scratch_checks_business_not_a_hidden_cache() -> None:
    assert caches.problems(load("study=autotune_cold")) == []


def test_a_knob_listing_is_kept_by_image_id_and_not_run_again() -> None:
    import json

    cfg = load("study=guard_finalize_only")
    runtime, calls = listing_runtime(json.dumps(KNOWN))
    first = guard_knobs.check_knobs(cfg, runtime, "run-1")
    runtime, calls = listing_runtime(json.dumps(KNOWN))
    again = guard_knobs.check_knobs(cfg, runtime, "run-2")
    assert calls == [] and again == first  # no throwaway container the second time
    broken, calls = listing_runtime("not json")
    cfg.arms["fused"].knobs.command = ["--list-other-knobs"]  # another command: another listing
    guard_knobs.check_knobs(cfg, broken, "run-3")
    assert calls == [["--list-other-knobs"]]


# the arm's own interpreter (config/arms.py arm_interpreter) ------------------------------------------

def test_a_process_arms_probes_run_under_the_interpreter_its_command_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.arms import arm_interpreter, build_spec

    cfg = load("runtime=process", "arm@arms.baseline=vllm", "arms.baseline.image=process",
               "arms.baseline.command=[/venv/bin/python3,-m,vllm.entrypoints.openai.api_server]")
    arm = cfg.arms["baseline"]
    assert arm.python == "python3"  # the template's default: the orchestrator's own, on PATH
    assert arm_interpreter(arm, process=True) == "/venv/bin/python3"
    assert arm_interpreter(arm, process=False) == "python3"  # in an image: the image's
    assert build_spec(arm).interpreter == "/venv/bin/python3"  # the code identity hashes that venv
    script = tmp_path / "vllm"
    script.write_text("#!/venv2/bin/python3.11\nimport sys\n")
    arm.command = [str(script), "serve"]
    assert arm_interpreter(arm, process=True) == "/venv2/bin/python3.11"  # a console script's shebang
    arm.command = ["/usr/local/bin/engine-binary"]
    assert arm_interpreter(arm, process=True) is None  # not knowable: never the orchestrator's python3
    listing = guard_knobs.listing_command(arm, process=True)
    assert isinstance(listing, str) and "interpreter is unknown" in listing
    assert fingerprint.probe_container(FakeRuntime({}), None, python=None)["error"].startswith(  # type: ignore[arg-type]
        "unknown: the arm's command names no Python")
    arm.python = "/venv3/bin/python"
    assert arm_interpreter(arm, process=True) == "/venv3/bin/python"  # named explicitly


def test_every_vllm_arm_asks_for_token_ids_and_lists_its_knobs_with_the_shipped_probe() -> None:
    from orchestrator import probes

    for template in ("vllm", "vllm_nonfused", "vllm_cpu", "vllm_cpu_process"):
        arm = load(f"arm@arms.baseline={template}").arms["baseline"]
        assert arm.engine == "vllm", template
        extra = profile_for(arm.engine).extra(arm.request_extra)
        assert extra == {"return_token_ids": True, "return_tokens_as_token_ids": True}, template
        assert guard_knobs.listing_command(arm, process=False) == (["-c", probes.source("vllm_knobs")], [arm.python])
    arm.request_extra = {"return_token_ids": None}  # an arm drops what its engine's profile asks for
    assert profile_for(arm.engine).extra(arm.request_extra) == {"return_tokens_as_token_ids": True}
    reference = load("arm@arms.baseline=reference_fused").arms["baseline"]
    assert reference.engine == "reference" and profile_for(reference.engine).extra({}) == {}


def test_an_unknown_engine_is_one_line_listing_the_known_ones() -> None:
    from orchestrator.config.validate import validate

    problems = validate(load("arms.baseline.engine=vlm"))
    assert len(problems) == 1 and "arms.baseline.engine" in problems[0] and "'vllm'" in problems[0], problems


def test_engine_profiles_read_aliases_capacity_and_logprob_limits() -> None:
    vllm = profile_for("vllm")
    assert vllm.flag_value({"tp": 2}, "tensor-parallel-size") == 2
    assert vllm.setting({"no-enable-prefix-caching": True}, "prefix_cache") is False  # the switch, negated
    assert vllm.setting({"enable-prefix-caching": True}, "prefix_cache") is True
    assert vllm.capacity({"max_num_seqs": 8}) == 8 and vllm.capacity({}) is None
    assert vllm.max_logprobs({}) == (20, True) and vllm.max_logprobs({"max-logprobs": 5}) == (5, False)
    assert vllm.log_facts(["x", "INFO vLLM server version 0.32.0", "vLLM server version 9"]) == {
        "engine_version": "0.32.0"}
    assert fingerprint.arm_cell({"tp": 2}, None)["topology"]["tensor_parallel"] == 2


@pytest.mark.parametrize(("value", "verdict"), [("true", "they contradict"), ("false", "they say the same twice")])
def test_an_arm_that_sets_a_switch_both_ways_gets_one_line(value: str, verdict: str) -> None:
    """batch-invariant and no-batch-invariant in one arm: one line naming both settings, not a confound that
    labels the declared spelling as not declared."""
    cfg = load("study=guard_finalize_only", "~arms.fused.engine_args.fused-finalize",
               "+arms.fused.engine_args.no-batch-invariant=true", f"+arms.fused.engine_args.batch-invariant={value}",
               "study.variables.fused=[engine_args.no-batch-invariant]")
    with pytest.raises(ConfigError) as err:
        guard_declared.enforce_declared(cfg)
    assert err.value.problems == [f"arms.fused sets both engine_args.batch-invariant={value} and "
                                  f"engine_args.no-batch-invariant=true: {verdict}; keep one"]


def test_a_declared_variable_the_stand_in_replaces_is_said_to_make_the_ab_an_aa() -> None:
    from orchestrator.report.guard import headline as guard_headline

    stood = guard_declared.declared_check(load("study=vllm_fused_finalize", "stand_in=orchestrator/ref:1"))
    [pair] = stood.pairs
    assert pair.verdict == results.SINGLE and pair.stand_in_equal == pair.declared  # image and build, both replaced
    [said] = guard_declared.warnings(stood)
    assert "no longer differ in image, build, so their A/B compares the stand-in with itself (an A/A)" in said
    said = guard_headline(GuardResult(declared=stood))
    assert "**But stand_in=orchestrator/ref:1 runs every arm on one image" in said
    assert GuardResult.from_json(GuardResult(declared=stood).to_json()).declared == stood  # guard.json keeps it
    flags = guard_declared.declared_check(load("study=vllm_position_parity", "stand_in=orchestrator/ref:1"))
    assert all(not p.stand_in_equal for p in flags.pairs) and guard_declared.warnings(flags) == []  # flags stay


def test_a_negated_switch_is_the_same_variable_both_ways() -> None:
    """engine_args.no-batch-invariant: true is --no-batch-invariant, as batch-invariant: false is (the profile's
    argv): its implications are the switch's, and the config check compares the two spellings as one flag."""
    cfg = load("study=guard_finalize_only", "~arms.fused.engine_args.fused-finalize",
               "+arms.fused.engine_args.no-batch-invariant=true",
               "study.variables.fused=[engine_args.no-batch-invariant]")
    assert pair(guard_declared.enforce_declared(cfg), "fused").verdict == results.SINGLE
    prints = {"unfused": fp(), "fused": fp(batch_invariant="off")}
    assert pair(guard_observed.observed_check(cfg, prints), "fused").verdict == results.SINGLE
    # the baseline spells it positively, the arm negatively, the declaration either way: one leaf, one variable
    both = load("study=guard_finalize_only", "~arms.fused.engine_args.fused-finalize",
                "+arms.unfused.engine_args.batch-invariant=true", "+arms.fused.engine_args.no-batch-invariant=true",
                "study.variables.fused=[engine_args.batch-invariant]")
    checked = pair(guard_declared.enforce_declared(both), "fused")
    assert checked.verdict == results.SINGLE and checked.differing == {"engine_args.batch-invariant": [True, False]}
    assert pair(guard_observed.observed_check(both, prints), "fused").verdict == results.SINGLE
    # equal as run: declared but not different, whichever way each arm writes it
    same = load("study=guard_finalize_only", "~arms.fused.engine_args.fused-finalize",
                "+arms.unfused.engine_args.batch-invariant=false", "+arms.fused.engine_args.no-batch-invariant=true",
                "study.variables.fused=[engine_args.no-batch-invariant]")
    assert pair(guard_declared.declared_check(same), "fused").unused == ["engine_args.no-batch-invariant"]
    # a table entry written negatively covers the switch too
    cfg.study.implications = {"engine_args.no-batch-invariant": ["log_facts.batch_invariant"]}
    cfg.study.variables["fused"] = ["engine_args.batch-invariant"]
    cfg.arms["fused"].engine_args = {"batch-invariant": False}
    assert pair(guard_observed.observed_check(cfg, prints), "fused").verdict == results.SINGLE


@pytest.mark.parametrize("arm", ["baseline", "wide_batch"])
def test_a_mistyped_flag_gets_its_own_line_not_a_confound_it_causes_too(arm: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """+arms.X.engine_args.max-num-seq=8 once said first 'engine_args.max-num-seq (8 -> <absent>) [NOT declared]'
    (a confound of the typo's making), then the knob check's 'Did you mean'."""
    from orchestrator.run import refusals
    from tests.fake_engine import fake_runtime

    typed = load(f"+arms.{arm}.engine_args.max-num-seq=8")
    for arm_config in typed.arms.values():
        arm_config.image, arm_config.build.context = "fake-engine", None
    monkeypatch.setattr(refusals, "runtime_for", lambda *_: fake_runtime())
    [said] = refusals.refusals(typed, [], "typo").problems
    assert said.startswith(f"arm '{arm}': flag --max-num-seq is not known") and "max-num-seqs" in said, said
    typed.study.allow_unknown_knobs = True  # run anyway: then the typo's leaf is a difference like any other
    [said] = refusals.refusals(typed, [], "typo").problems
    assert "engine_args.max-num-seq (" in said and "[NOT declared]" in said, said
