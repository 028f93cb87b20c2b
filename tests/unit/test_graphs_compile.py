"""CUDA graphs and torch.compile as variables: the neutral settings each profile maps to one flag (or one key of
one), and the guard's line where an A/B varies a flag that moves both (vLLM's --enforce-eager)."""

from __future__ import annotations

import pytest

from orchestrator import config
from orchestrator.engines import ENGINES, profile_for
from orchestrator.guard import declared as guard_declared
from orchestrator.guard.results import SINGLE, GuardResult
from orchestrator.report.guard import headline


def load(*overrides: str):  # type: ignore[no-untyped-def]
    return config.to_typed(config.compose(list(overrides)))


def test_each_profile_maps_graphs_and_compile_to_a_flag_of_its_own() -> None:
    vllm = profile_for("vllm")
    assert (vllm.settings["cuda_graphs"], vllm.settings["compile"]) == ("compilation-config.cudagraph_mode",
                                                                        "compilation-config.mode")
    assert vllm.coupled["enforce-eager"] == ("cuda_graphs", "compile")
    assert "enforce-eager" not in vllm.settings.values()  # no longer the graphs switch: it moves two
    assert profile_for("reference").settings["cuda_graphs"] == "cuda-graphs"
    assert not profile_for("reference").coupled  # its --enforce-eager is accepted and does nothing
    hooked = profile_for("transformers_hooked")
    assert (hooked.settings["cuda_graphs"], hooked.settings["compile"]) == ("cuda-graphs", "compile")
    serve = profile_for("transformers_serve")
    assert serve.settings["cuda_graphs"] == "cb-use-cuda-graph" and "compile" not in serve.settings
    assert serve.coupled["compile"] == ("cuda_graphs", "compile")  # static cache + reduce-overhead: both
    assert all("graphs" not in p.settings for p in ENGINES.values())  # the old name is gone everywhere


def test_a_setting_that_is_a_key_of_a_json_flag_reads_the_map_or_its_json_text() -> None:
    vllm = profile_for("vllm")
    args = {"compilation-config": {"cudagraph_mode": "NONE"}}
    assert vllm.setting(args, "cuda_graphs") == "NONE" and vllm.setting(args, "compile") is None
    assert vllm.setting({"compilation-config": '{"mode": 0}'}, "compile") == 0
    assert vllm.setting({"compilation-config": "not json"}, "compile") is None
    assert vllm.setting({"enforce-eager": True}, "cuda_graphs") is None  # the coupled flag is no setting's
    assert vllm.argv(args) == ["--compilation-config", '{"cudagraph_mode": "NONE"}']  # one JSON value
    assert profile_for("transformers_hooked").setting({"no-cuda-graphs": True}, "cuda_graphs") is False


@pytest.mark.parametrize("eager_off", [["arms.seqs16.engine_args.enforce-eager=false"],  # either spelling
                                       ["~arms.seqs16.engine_args.enforce-eager",
                                        "+arms.seqs16.engine_args.no-enforce-eager=true"]])
def test_an_ab_of_enforce_eager_is_said_to_move_two_variables_in_check_and_the_report(eager_off: list[str]) -> None:
    checked = guard_declared.enforce_declared(load(
        "study=vllm_cpu_max_num_seqs", "arms.seqs16.engine_args.max-num-seqs=1", *eager_off,
        "study.variables.seqs16=[engine_args.enforce-eager]"))
    [pair] = checked.pairs
    assert pair.verdict == SINGLE  # one leaf in config: still runs, not refused
    [said] = guard_declared.warnings(checked)
    assert said == ("arm 'seqs16' differs from baseline 'seqs1' in engine_args.enforce-eager, one flag that moves 2 "
                    "variables (cuda_graphs and compile): its A/B is not one variable; vary one alone with "
                    "engine_args.compilation-config.cudagraph_mode (cuda_graphs) or "
                    "engine_args.compilation-config.mode (compile)")
    assert f"**But {said}**" in headline(GuardResult(declared=checked))
    assert GuardResult.from_json(GuardResult(declared=checked).to_json()).declared == checked  # guard.json keeps it


def test_no_line_where_the_arms_run_the_coupled_flag_alike() -> None:
    cfg = load("study=vllm_cpu_max_num_seqs")  # both arms eager: the A/B is max-num-seqs alone
    assert guard_declared.warnings(guard_declared.declared_check(cfg)) == []


def test_one_key_of_the_compilation_config_is_one_variable_with_no_line() -> None:
    cfg = load("study=vllm_cpu_max_num_seqs", "arms.seqs16.engine_args.max-num-seqs=1",
               "+arms.seqs16.engine_args.compilation-config={cudagraph_mode: NONE}",
               "study.variables.seqs16=[engine_args.compilation-config.cudagraph_mode]")
    checked = guard_declared.enforce_declared(cfg)
    assert checked.pairs[0].verdict == SINGLE and guard_declared.warnings(checked) == []
