"""The words a person reads: one helper for counts and ordinals (errors.counted, errors.ordinal) wherever a
count meets its noun, config values as a config writes them, and lines and titles that say what the record
holds (an A/A named by its arms, a load phase's chart named by its phases, a process arm's version as its
interpreter has it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.analysis.results import Comparison, ScheduleCheck
from orchestrator.errors import ConfigError, counted, noun, ordinal
from orchestrator.record.recorded import read
from orchestrator.report.build import build
from orchestrator.report.markdown import headline
from tests.conftest import ROOT
from tests.load_record import ArmPlan, write_load_record


def test_counts_and_ordinals_agree_with_their_number() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th"]
    assert [counted(n, "cell") for n in (0, 1, 2)] == ["0 cells", "1 cell", "2 cells"]
    assert counted(1, "batch", "batches") == "1 batch" and counted(3, "batch", "batches") == "3 batches"
    assert noun(1, "step") == "step" and noun(2, "batch", "batches") == "batches"


def test_a_single_top_1_flip_and_a_branch_of_one_request_are_singular() -> None:
    from orchestrator.analysis.results import Cell
    from orchestrator.report.cost_md import flips

    cell = Cell("a", "p", "load", 8, 0, 2, 2, 1, 0.5, 0.0, top1_flips=1, top1_flip_position_count=1)
    assert flips([cell]) == "1 top-1 flip at 1 position"


def test_a_load_phase_s_plan_says_every_3rd_a_probe() -> None:
    from orchestrator.run.estimate import arm_lines

    typed = config.to_typed(config.compose(["study=load_point", "protocol.phases.load.load.probe_every=3"]))
    [line] = [ln for ln in arm_lines(typed, "baseline", None) if "requests:" in ln]
    assert "every 3rd a probe" in line and "per cell of 2 prompts:" in line, line


def test_one_schedule_comparison_differs() -> None:
    differ = ScheduleCheck("p", "differ", 3, None, arm="a", phase_a="sequential", phase_b="concurrent")
    said = headline(Comparison(schedules=[differ]))
    assert "; 1 schedule comparison differs." in said, said
    assert "2 schedule comparisons differ" in headline(Comparison(schedules=[differ, differ]))


def test_the_a_a_arm_s_lines_name_the_arm_it_is_read_against(tmp_path: Path) -> None:
    paths = write_load_record(tmp_path / "run", {"base": ArmPlan([0.1, 0.1, 0.1]),
                                                 "base_aa": ArmPlan([0.1, 0.11, 0.1])}, baseline="base")
    build(read(paths))
    page = paths.report_md.read_text()
    opening = page[page.index("- **base_aa**"):page.index("## Verdict")]
    assert "against the A/A" not in page
    assert opening.count("against base (its A/A: the same config started again): ") == 2, opening


def test_the_distinct_signatures_chart_is_named_by_the_study_s_phases(tmp_path: Path) -> None:
    paths = write_load_record(tmp_path / "run", {"base": [ArmPlan([0.1, 0.1]), ArmPlan([0.1], phase="load_16",
                                                                                      rate_per_s=16.0)]})
    build(read(paths))
    html = paths.report_html.read_text()
    assert "Distinct signatures per phase: load_8, load_16" in html and "sequential vs concurrent" not in html


def test_a_null_in_an_error_reads_null_as_the_user_wrote_it() -> None:
    from orchestrator.config.catalog import written
    from orchestrator.config.validate import load

    at = "protocol.phases.load.load"
    with pytest.raises(ConfigError) as caught:
        load(["study=load_point", f"{at}.rate_per_s=null", f"{at}.concurrency=null"])
    [problem] = caught.value.problems
    assert problem.startswith(f"{at}.rate_per_s=null: must be a rate, a concurrency, or both"), problem
    assert [written(v) for v in (None, True, False, "x", 2.5)] == ["null", "true", "false", "'x'", "2.5"]


@pytest.mark.parametrize("arm", sorted(p.stem for p in (ROOT / "conf" / "arm").glob("*process*.yaml")))
def test_a_process_arm_s_description_states_no_version_its_interpreter_may_not_have(arm: str) -> None:
    """A process runs what its interpreter has installed (python=... may name another): the version is the
    one the run records and `check` lists, never one written into the description."""
    typed = config.to_typed(config.compose(["runtime=process", f"arm@arms.baseline={arm}", "~arms.wide_batch"]))
    description = typed.arms["baseline"].description
    assert description and not re.search(r"\d+\.\d+\.\d+", description), description


def test_the_hooked_engine_s_docstrings_say_every_module_as_its_recorder_hooks() -> None:
    import sys

    import torch

    sys.path.insert(0, str(ROOT / "arms" / "transformers-hooked"))
    try:
        import hookedengine
        from hookedengine.digests import Recorder
    finally:
        sys.path.remove(str(ROOT / "arms" / "transformers-hooked"))
    from orchestrator.engines import transformers_hooked

    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()), torch.nn.Linear(2, 1))
    hooked = [name for name, _ in Recorder(model, 4, None).modules]  # type: ignore[arg-type]
    assert hooked == ["0", "0.0", "0.1", "1"]  # the container "0" as well as its leaves
    for doc in (hookedengine.__doc__ or "", transformers_hooked.__doc__ or ""):
        assert "leaf module" not in doc and "every module" in " ".join(doc.split()), doc


def test_a_pair_with_nothing_comparable_is_not_identical_for_0() -> None:
    from orchestrator.analysis.results import Divergence
    from orchestrator.report.headline import _differ

    unknown = Divergence("p", "not comparable", None, None)
    assert _differ([unknown, unknown], "prompts") == "not comparable for 2 of 2 prompts"
    assert _differ([Divergence("p", "identical", None, None), unknown], "prompts") == \
        "identical for 1 of 2 prompts, 1 not comparable"


def test_the_one_line_summary_counts_only_the_cells_it_measured() -> None:
    """A cell without signatures (its only batch kept out, or no answer) is no 'one signature' cell."""
    from orchestrator.analysis.results import Cell
    from orchestrator.report.headline import summary
    from orchestrator.report.listing import verdict

    def cell(prompt: str, signatures: int | None) -> Cell:
        return Cell("a", prompt, "concurrent", 8 if signatures else 0, 0, 1, signatures, 0, None, None)

    assert summary(Comparison(cells=[cell("p", 1), cell("q", None)])) == \
        "a: one signature in 1 of 2 cells, 1 not measured"
    assert summary(Comparison(cells=[cell("p", None)])) == "a: not measured in any of 1 cell"
    assert verdict({"cells": []}) == "no cell measured"


def test_an_honest_negative_gives_one_n_where_every_cell_has_the_same() -> None:
    from orchestrator.analysis.results import Cell
    from orchestrator.report.markdown import no_difference

    same = [Cell("a", p, "load", 9, 0, 1, 1, 0, 0.283, 0.0) for p in ("x", "y")]
    said = no_difference(same)
    assert "one signature in each of 2 cells (n = 9 each; divergence rate <= 28.3% at 95%)." in said, said
    same[0].n = 4
    assert "(n = 4-9 each; divergence rate <= 28.3% at 95% in the smallest)" in no_difference(same)


def test_a_single_cell_left_out_of_the_heatmap_is_one_cell() -> None:
    from orchestrator.report import svg

    flat = [("a/flat/s", [0.0] * 8)]
    spread = [(f"b/p{i:02d}/s", [0.0] * 4 + [0.01 * (i + 1)] * 4) for i in range(svg.MAX_ROWS + 1)]
    picture = svg.heatmap("spread", flat + spread, "generated position")
    assert "not drawn: 1 cell with spread 0 at every position, 1 cell of smaller spread" in picture


def test_a_refusal_over_one_leaf_says_one_leaf() -> None:
    from orchestrator.guard.declared import refusal
    from orchestrator.guard.results import CONFOUNDED, DeclaredCheck, DeclaredPair

    pair = DeclaredPair("b", [], {"env.X": ["1", "2"]}, ["env.X"], CONFOUNDED)
    [said] = refusal(DeclaredCheck(True, "a", False, [pair], [], []))
    assert "differs from baseline 'a' in 1 leaf, 1 beyond" in said, said


def test_co_residents_in_one_number_where_least_and_most_agree() -> None:
    from orchestrator.analysis.cost_results import CoResidents
    from orchestrator.report.cost_md import _co_residents

    def found(least: int, most: int) -> list[CoResidents]:
        return [CoResidents("a", "p", "load", 4, least, float(most), most, "/metrics", observed=4)]

    assert _co_residents(found(0, 0)) == ", each alongside 0 other requests (/metrics)"
    assert _co_residents(found(1, 1)) == ", each alongside 1 other request (/metrics)"
    assert _co_residents(found(0, 2)) == ", each alongside 0-2 other requests (/metrics)"


def test_a_resumed_arm_s_second_cold_request_is_no_second_cell() -> None:
    """`run --resume` restarts the engine and sets its first answer apart as cold too (.../cold/-1): two cold
    requests of one cell are one cell in the sentence, as in the run that was not interrupted."""
    from orchestrator.analysis.results import Cell, ColdCheck
    from orchestrator.report.headline import sentences

    cell = Cell("baseline", "capital", "load", n=6, errors=0, distinct_completions=1, distinct_signatures=1,
                divergent=0, upper_bound_95=0.39, lower_bound_95=0.0)
    both = Comparison(cells=[cell], cold=[ColdCheck("baseline", "capital", "load", True)] * 2)
    assert "cold first request matches warm in 1 of 1 cells" in sentences(both, [], 0.0)[0]
    one_differs = Comparison(cells=[cell], cold=[ColdCheck("baseline", "capital", "load", True),
                                                 ColdCheck("baseline", "capital", "load", False)])
    assert "cold first request differs from warm in 1 of 1 cells" in sentences(one_differs, [], 0.0)[0]


def test_a_load_phase_whose_every_request_is_a_probe_says_so() -> None:
    from orchestrator.run.estimate import arm_lines

    typed = config.to_typed(config.compose(["study=load_point", "protocol.phases.load.load.probe_every=1"]))
    [line] = [ln for ln in arm_lines(typed, "baseline", None) if "requests:" in ln]
    assert "every request a probe" in line and "1st" not in line, line
