"""`orchestrator triage`'s procedure without an engine: the steps' sizes from their bounds, the budget, which
switches an arm has on, the findings' ranking, and a triage interrupted and resumed (a fake step runner writes
each step's report.json as a study would)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.stats import upper_bound_zero
from orchestrator.triage import procedure, steps
from orchestrator.triage.findings import REPEATABLE, rank
from orchestrator.triage.runner import Source
from orchestrator.triage.state import DONE, SKIPPED, Cell, StepOutcome, TriageState, load

ARM = {"engine": "reference", "engine_args": {"max-num-seqs": 16}, "env": {}}
PROMPTS = {"name": "default", "prompts": {"capital": {"text": "a"}, "count": {"text": "b"}}}


def source(**engine_args: object) -> Source:
    arm = {**ARM, "engine_args": {**ARM["engine_args"], **engine_args}}
    return Source("baseline", arm, {"kind": "process"}, PROMPTS, {"max_tokens": 4}, "completions")


SIZING = steps.Sizing(target_bound=0.1, start_bound=0.5, budget_requests=400, long_prompt_tokens=3000)


def test_each_step_is_sized_from_the_bound_it_must_show() -> None:
    planned = {p.name: p for p in steps.first_steps(source(), SIZING)}
    floor = planned["floor"].spec.protocol["phases"]["sequential"]["repeats"] * 2
    assert upper_bound_zero(floor) <= 0.1 < upper_bound_zero(floor - 2)  # the fewest per prompt that show it
    assert planned["starts"].spec.starts == 5 and upper_bound_zero(5) <= 0.5 < upper_bound_zero(4)
    assert planned["concurrent"].spec.protocol["phases"]["concurrent"]["repeats"] == 16  # the engine's batch size


def test_a_step_over_the_budget_is_cut_and_one_that_cannot_show_anything_is_skipped() -> None:
    floor = steps.first_steps(source(), SIZING)[1]
    cut = steps.scaled(floor, floor.requests // 2)
    assert cut is not None and cut.requests < floor.requests and "cut to" in cut.shows
    assert steps.scaled(floor, 3) is None


def test_only_the_switches_the_arm_has_on_are_tried() -> None:
    assert steps.open_switches(source()) == []
    assert [s.name for s in steps.open_switches(source(**{"fused-finalize": True}))] == ["fused_finalize"]
    made = steps.switch_step(steps.open_switches(source(**{"fused-finalize": True}))[0],
                             steps.first_steps(source(**{"fused-finalize": True}), SIZING)[1])
    assert made.spec.arms["fused_finalize_repeatable"]["engine_args"]["fused-finalize"] is False
    assert made.spec.arms["as_given"]["engine_args"]["fused-finalize"] is True


def _cell(arm: str, k: int, n: int = 6) -> Cell:
    return Cell(arm, "sequential", "capital", n, k, k + 1 if k else 1, 0.0, 1.0)


def test_a_switch_that_removes_the_variation_ranks_before_what_is_unexplained() -> None:
    state = TriageState("baseline", [], 400, {
        "floor": StepOutcome("floor", DONE, cells=(_cell("as_given", 5),), command="floor cmd"),
        "switch_fused_finalize": StepOutcome("switch_fused_finalize", DONE, command="ab cmd", cells=(
            _cell("as_given", 5), _cell("fused_finalize_repeatable", 0, 30)))})
    found = rank(state, "reference")
    assert [f.cause for f in found.findings] == ["fused_finalize"]
    assert found.findings[0].command == "ab cmd" and found.verdict.startswith("most likely cause: fused_finalize")
    state.steps["switch_fused_finalize"] = StepOutcome("switch_fused_finalize", DONE, cells=(
        _cell("as_given", 5), _cell("fused_finalize_repeatable", 5)))  # no effect: not the cause
    assert [f.kind for f in rank(state, "reference").findings] == ["unexplained"]
    state.steps["switch_fused_finalize"] = StepOutcome("switch_fused_finalize", SKIPPED,
                                                       reason="the budget's 5 requests left are fewer than its 22")
    unexplained = rank(state, "reference").findings[0]  # the switch not tried: the finding says why, and the fix
    assert "not tried for the budget: switch_fused_finalize (a larger --budget-requests" in unexplained.fix_cost


def test_nothing_found_is_repeatable_in_everything_tried_with_its_bound() -> None:
    state = TriageState("baseline", [], 400, {
        "floor": StepOutcome("floor", DONE, cells=(_cell("as_given", 0, 30),)),
        "length": StepOutcome("length", SKIPPED, reason="the budget's 3 requests left are fewer than its 16"),
        "onset": StepOutcome("onset", SKIPPED, reason="no variation to find an onset of")})
    found = rank(state, "reference")
    assert found.findings == () and found.verdict.startswith(REPEATABLE)
    assert f"<= {upper_bound_zero(30):.1%}" in found.verdict and found.verdict.endswith("not tried: length")
    from orchestrator.triage.page import to_markdown

    page = to_markdown(found)
    assert page.splitlines()[2] == f"**{found.verdict}**"  # the verdict first
    assert "## Not run by triage" in page and "load points to saturation" in page  # said, not left out silently


def _fake_run(ran: list[str], stop_at: str | None = None, varies: str = "") -> procedure.Run:
    """Each step's run dir with a report.json as a study writes it: repeatable, but sequential and concurrent
    answers differ for the arm as given in the step named `varies` (and in every A/B, where the switch removes
    it); an onset search answers one line."""
    def run(step_dir: Path, onset: bool) -> tuple[int, tuple[str, ...]]:
        if step_dir.name == stop_at:
            raise KeyboardInterrupt
        ran.append(step_dir.name)
        (step_dir / "run").mkdir(parents=True)
        if onset:
            return 0, ("onset in [1, 2] at 95 % (6 jobs, 52 requests)",)
        cells = [{"arm": "as_given", "phase": "sequential", "prompt_id": "capital", "n": 6, "divergent": 0,
                  "distinct_signatures": 1, "lower_bound_95": 0.0, "upper_bound_95": 0.39}]
        starts = [{"arm": "as_given", "starts": 5, "ready": 5, "failure_upper_95": 0.45, "peak_memory_bytes": {},
                   "time_to_ready_s": {}}]
        schedules = [{"arm": "as_given", "prompt_id": "capital", "verdict": "differ"}] if step_dir.name in (
            varies, f"switch_{varies}") or step_dir.name.startswith("switch_") else []
        cost: dict[str, Any] = {"starts": starts}
        if step_dir.name.startswith("cost_"):  # the fix at the load point: paired ratios over its windows
            cost["phases"] = [{"arm": "as_given", "phase": "load", "load_point": "closed loop of 16"}]
            cost["ratios"] = [{"arm_a": "as_given", "arm_b": "x", "phase": "load", "metric": metric, "ratio": r,
                               "lower_95": low, "upper_95": high, "note": ""}
                              for metric, r, low, high in (("request_throughput_per_s", 0.523, 0.487, 0.561),
                                                           ("latency_s", 1.825, None, None),
                                                           ("output_tokens_per_s", 0.5, 0.4, 0.6))]
        (step_dir / "run" / "report.json").write_text(json.dumps({"cells": cells, "cost": cost,
                                                                  "schedules": schedules}), encoding="utf-8")
        return 0, ()
    return run


def test_an_interrupted_triage_resumes_with_the_first_step_not_done(tmp_path: Path) -> None:
    ran: list[str] = []
    state = TriageState("baseline", ["x"], 400)
    with pytest.raises(KeyboardInterrupt):
        procedure.triage(source(), SIZING, tmp_path, state, _fake_run(ran, stop_at="concurrent"))
    assert ran == ["starts", "floor"]
    kept = load(tmp_path)
    assert kept is not None and list(kept.steps) == ["starts", "floor"]
    procedure.triage(source(), SIZING, tmp_path, kept, _fake_run(ran))
    assert ran == ["starts", "floor", "concurrent", "length", "load"]  # nothing done twice
    assert rank(kept, "reference").verdict.startswith(REPEATABLE)


def test_the_onset_leaves_the_switches_their_budget_and_the_switch_that_removes_it_is_found(tmp_path: Path) -> None:
    ran: list[str] = []
    arm = source(**{"fused-finalize": True})
    budget = 200  # less than the onset and the A/B would want
    state = procedure.triage(arm, SIZING, tmp_path, TriageState("baseline", [], budget),
                             _fake_run(ran, varies="concurrent"))
    assert ran == ["starts", "floor", "concurrent", "length", "onset", "switch_fused_finalize", "cost_fused_finalize"]
    study = (tmp_path / "onset" / "config" / "study" / "triage_step.yaml").read_text(encoding="utf-8")
    ab = steps.switch_step(steps.open_switches(arm)[0], steps.first_steps(arm, SIZING)[2])
    spent = sum(state.steps[name].requests for name in ("starts", "floor", "concurrent", "length"))
    assert f"max_requests: {budget - spent - ab.requests}" in study  # what the A/B needs kept back
    found = rank(state, "reference")
    assert found.findings[0].cause == "fused_finalize"
    assert any("onset in [1, 2]" in e for e in found.findings[0].evidence)


def test_the_onset_along_the_batch_size_holds_as_many_requests_at_each_size() -> None:
    """One batch a job held 1 request at batch size 1 (the H100's onset stayed open, docs/triage.md): now as many
    batches of each size as fit in the engine's batch size of requests (over half of it), never more."""
    from omegaconf import OmegaConf

    from orchestrator.config import schema

    schema.register_configs()
    first = steps.first_steps(source(), SIZING)
    onset = steps.onset_step("concurrent", first, SIZING)
    assert onset is not None
    concurrent = OmegaConf.create(onset.spec.protocol).phases.concurrent
    batch = concurrent.repeats
    for size in range(1, batch + 1):
        concurrent.repeats = size
        assert batch / 2 < concurrent.batches * size <= batch and concurrent.batches == batch // size
    assert onset.requests == steps.ONSET_JOBS * (2 + batch) * len(onset.spec.prompts["prompts"])  # as before


def test_the_fix_s_cost_under_load_is_its_a_b_at_the_load_point_and_said_where_the_budget_left_none(
        tmp_path: Path) -> None:
    """The switch removed the variation on the concurrent step's protocol: its A/B runs again at the load point,
    and the finding's cost gives the paired ratios; where the budget leaves none, it says so."""
    arm = source(**{"fused-finalize": True})
    state = procedure.triage(arm, SIZING, tmp_path / "a", TriageState("baseline", [], 2000),
                             _fake_run([], varies="concurrent"))
    found = rank(state, "reference").findings[0]
    assert found.cause == "fused_finalize" and "cost_fused_finalize" in state.steps
    assert "; under load (cost_fused_finalize), with the switch against as given: at closed loop of 16: throughput " \
           "x0.52 [0.49, 0.56], latency x1.82 (no interval)" in found.fix_cost, found.fix_cost
    without = TriageState("baseline", [], 2000, {k: v for k, v in state.steps.items() if k != "cost_fused_finalize"})
    with_cost, alone = rank(state, "reference"), rank(without, "reference")
    assert (with_cost.divergent, with_cost.n) == (alone.divergent, alone.n)  # not one of the steps of cells
    skipped = StepOutcome("cost_fused_finalize", SKIPPED, reason="the budget's 12 requests left are fewer than its 184")
    state.steps["cost_fused_finalize"] = skipped
    said = rank(state, "reference").findings[0].fix_cost
    assert said.endswith(f"; under load: not measured (cost_fused_finalize: {skipped.reason})"), said


def test_a_known_issue_of_the_arm_s_versions_is_a_finding_once_after_the_causes() -> None:
    line = "vllm 0.11.0 is in the range of a known issue: fused finalize atomics (fixed in 0.12)"
    state = TriageState("baseline", [], 400, {
        name: StepOutcome(name, DONE, cells=(_cell("as_given", 0, 30),), known_issues=(line,))
        for name in ("floor", "concurrent")})
    found = rank(state, "reference")
    assert [(f.kind, f.title) for f in found.findings] == [("known issue", line)]
    assert found.verdict.startswith(REPEATABLE) and found.verdict.endswith("1 known issue(s) of its versions")


def test_a_step_whose_study_failed_to_measure_is_failed_and_says_where(tmp_path: Path) -> None:
    from orchestrator.triage.observe import observe
    from orchestrator.triage.state import FAILED

    failed = observe("floor", tmp_path / "run", "cmd", 4)
    assert failed.status == FAILED and str(tmp_path / "run") in failed.reason and "exit status 4" in failed.reason


def test_the_same_out_with_other_arguments_is_refused_and_a_resume_needs_a_triage(tmp_path: Path) -> None:
    from orchestrator.errors import UsageError
    from orchestrator.triage.state import save
    from orchestrator.verbs import triage as verb

    save(tmp_path, TriageState("baseline", ["study=other"], 400))
    with pytest.raises(UsageError, match="a triage of other arguments \\(study=other\\)"):
        verb.main(["runtime=process", "arm@arms.baseline=reference_process", "--out", str(tmp_path)])
    with pytest.raises(UsageError, match="holds no triage"):
        verb.main(["--resume", str(tmp_path / "nothing")])


def test_a_batch_kept_out_of_the_verdict_still_counts_against_the_budget(tmp_path: Path) -> None:
    from orchestrator.triage.observe import observe

    (tmp_path / "run").mkdir()
    cells = [{"arm": "as_given", "phase": "sequential", "prompt_id": "capital", "n": 4, "divergent": 0,
              "distinct_signatures": 1, "lower_bound_95": 0.0, "upper_bound_95": 0.5},
             {"arm": "as_given", "phase": "concurrent", "prompt_id": "capital", "n": 0, "divergent": 0,
              "distinct_signatures": None, "lower_bound_95": None, "upper_bound_95": None, "batches": 1,
              "batches_kept_out": 1, "batch_size": 16}]  # not co-resident: sent, but not in n
    (tmp_path / "run" / "report.json").write_text(json.dumps({"cells": cells, "cold": [{}]}), encoding="utf-8")
    assert observe("concurrent", tmp_path / "run", "cmd", 0).requests == 4 + 16 + 1


def test_a_failed_step_says_what_its_arm_said(tmp_path: Path) -> None:
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import TableWriter
    from orchestrator.triage.observe import observe

    paths = RunPaths(tmp_path / "run").make()
    with TableWriter(paths, "arms", "arms") as writer:
        writer.append({"study": "s", "run_id": "r", "arm": "as_given", "status": "failed", "attempt": 0, "start": 0,
                       "error": "length_tokens: arm as_given's server refused prompt 'long' of 3000 tokens"})
    outcome = observe("length", paths.root, "orchestrator run ...", 4)
    assert outcome.status == "failed"
    assert outcome.reason.endswith(": as_given: length_tokens: arm as_given's server refused prompt 'long' of "
                                   "3000 tokens") and str(paths.root) in outcome.reason


def test_a_steps_rerun_command_works_from_any_folder_into_a_new_dir(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.triage.runner import command

    monkeypatch.chdir(tmp_path)
    said = command(Path("triage/x/floor"))
    step = tmp_path / "triage" / "x" / "floor"
    assert said == ["orchestrator", "run", "--config-dir", str(step / "config"), "study=triage_step",
                    f"hydra.run.dir={step / 'rerun'}/${{now:%Y-%m-%d_%H-%M-%S}}"]  # not STEP/run, which holds its run
    assert command(Path("o"), onset=True)[2:3] == ["-m"] and "hydra.sweep.dir=" in command(Path("o"), True)[-1]


def test_a_step_left_nothing_by_the_switches_reserve_says_so_with_no_negative_count(tmp_path: Path) -> None:
    state = TriageState("baseline", [], 60, {"floor": StepOutcome("floor", DONE, requests=55)})
    planned = steps.load_step(source(), SIZING)
    said = procedure._step(tmp_path, state, planned, lambda *_: (0, ()), reserve=22).reason
    assert said.startswith("the budget's 0 requests left (kept for the switches' A/Bs: 22) are fewer than its ")


def test_what_else_a_switch_moved_reaches_its_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from orchestrator.record.paths import RunPaths
    from orchestrator.triage import observe

    paths = RunPaths(tmp_path / "run").make()
    cells = [{"arm": arm, "phase": "sequential", "prompt_id": "capital", "n": 6, "divergent": k,
              "distinct_signatures": k + 1, "lower_bound_95": 0.0, "upper_bound_95": 1.0}
             for arm, k in (("as_given", 5), ("fused_finalize_repeatable", 0))]
    paths.report_json.write_text(json.dumps({"cells": cells}))
    paths.guard_json.write_text("{}")
    asked: list[tuple[str, str]] = []

    def audit(run_dir: Path, a: str, b: str) -> SimpleNamespace:
        asked.append((a, b))
        return SimpleNamespace(moved=[SimpleNamespace(text=lambda: "log_facts.batch_window_ms (20 -> 50)")])

    monkeypatch.setattr(observe, "side_effects", audit)
    step = observe.observe("switch_fused_finalize", paths.root, "ab cmd", 0)
    assert asked == [("as_given", "fused_finalize_repeatable")]
    assert step.side_effects == ("log_facts.batch_window_ms (20 -> 50)",)
    found = rank(TriageState("baseline", [], 400, {"switch_fused_finalize": step}), "reference").findings[0]
    assert found.cause == "fused_finalize" and "side effect: log_facts.batch_window_ms (20 -> 50)" in found.evidence


def test_the_fix_s_cost_says_the_gpu_memory_where_the_starts_measured_it(tmp_path: Path) -> None:
    """On the H100, continuous batching's paged cache held 67827 MiB of the GPU and the fix 1461 MiB, while the
    host memory was the same: before, the cost line said only "peak memory ... (1.00x)"."""
    from orchestrator.record.paths import RunPaths
    from orchestrator.triage import observe

    paths = RunPaths(tmp_path / "run").make()
    cells = [{"arm": arm, "phase": "concurrent", "prompt_id": "capital", "n": 8, "divergent": k,
              "distinct_signatures": k + 1, "lower_bound_95": 0.0, "upper_bound_95": 1.0}
             for arm, k in (("as_given", 6), ("continuous_batching_repeatable", 0))]
    starts = [{"arm": arm, "starts": 1, "ready": 1, "peak_memory_bytes": {"avg": 1769 * 2**20},
               "peak_gpu_memory_bytes": {"avg": gpu * 2**20}, "time_to_ready_s": {"avg": 5.9}}
              for arm, gpu in (("as_given", 67827), ("continuous_batching_repeatable", 1461))]
    paths.report_json.write_text(json.dumps({"cells": cells, "cost": {"starts": starts}}))
    step = observe.observe("switch_continuous_batching", paths.root, "ab cmd", 0)
    found = rank(TriageState("cb", [], 400, {"switch_continuous_batching": step}), "transformers_serve").findings[0]
    assert "peak memory 1.77e+03 against 1.77e+03 MiB (1.00x); peak GPU memory 1.46e+03 against 6.78e+04 MiB " \
           "(0.02x); time to ready 5.9 against 5.9 s (1.00x)" in found.fix_cost, found.fix_cost


def test_after_ctrl_c_the_one_hint_is_the_triages_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.verbs import triage as verb

    def interrupted(*_: object) -> None:
        exc = KeyboardInterrupt()
        exc.add_note("this run's containers and processes were stopped and removed")
        exc.add_note("what it received is kept; `orchestrator run --resume t/floor/run` sends the rest")
        raise exc

    monkeypatch.setattr(procedure, "triage", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        verb.main(["runtime=process", "arm@arms.baseline=reference_process", "--out", str(tmp_path / "t")])
    assert caught.value.__notes__ == ["this run's containers and processes were stopped and removed",
                                      f"the steps done are kept in {tmp_path / 't'}; go on with: orchestrator triage "
                                      f"--resume {tmp_path / 't'}"]
