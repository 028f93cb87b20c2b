"""Where variation remains, triage's `locate` step (triage/inside.py) on canned outcomes: the steps ask for digests
only on an engine that records them, the first cell that varied is the one located, the located module becomes the
finding's cause and evidence with the op probe next, and an engine without digests still names the op probes and
`locate` as the next step."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.triage import inside, procedure, steps
from orchestrator.triage.findings import rank
from orchestrator.triage.runner import Source
from orchestrator.triage.state import DONE, SKIPPED, Cell, StepOutcome, TriageState

PROMPTS = {"capital": {"text": "a"}, "count": {"text": "b"}}
SIZING = steps.Sizing(target_bound=0.1, start_bound=0.5, budget_requests=400, long_prompt_tokens=3000)
PLANTED = "model.layers.0.mlp.down_proj"
LOCATE = "orchestrator locate /t/concurrent/run --cell as_given/capital/concurrent"


def source(engine: str, prompts: dict[str, object] = PROMPTS, **engine_args: object) -> Source:
    arm = {"engine": engine, "engine_args": {"max-num-seqs": 16, **engine_args}, "env": {}}
    return Source("planted", arm, {"kind": "process"}, {"prompts": prompts}, {"max_tokens": 4}, "completions")


def _asks_digests(made: Source) -> list[bool]:
    return [bool(p.spec.protocol["request"].get("digests")) for p in steps.first_steps(made, SIZING)]


def test_the_steps_ask_for_digests_only_where_the_engine_keeps_them() -> None:
    assert _asks_digests(source("transformers_hooked")) == [True] * 4
    assert _asks_digests(source("reference")) == [False] * 4  # no digests: the study would be refused
    assert _asks_digests(source("transformers_hooked", digests=False)) == [False] * 4  # the arm turned them off
    many = {f"p{i}": {"text": str(i)} for i in range(40)}  # 40 x 16 concurrent: more than the 512 it keeps
    assert _asks_digests(source("transformers_hooked", many))[2] is False


def _cell(phase: str, k: int, prompt: str = "capital") -> Cell:
    return Cell("as_given", phase, prompt, 8, k, k + 1 if k else 1, 0.0, 1.0)


def test_the_cell_located_is_the_first_that_varied() -> None:
    schedule = StepOutcome("concurrent", DONE, cells=(_cell("sequential", 0), _cell("concurrent", 0, "count")),
                           schedule_differs=("as_given/count",))
    assert inside.first_cell(schedule) == "as_given/count/concurrent"  # against its sequential phase
    branches = StepOutcome("floor", DONE, cells=(_cell("sequential", 0), _cell("sequential", 2, "count")))
    assert inside.first_cell(branches) == "as_given/count/sequential"  # its two branches
    assert inside.first_cell(StepOutcome("floor", DONE, cells=(_cell("sequential", 0),),
                                         cold_differs=("as_given/capital",))) is None  # the cold request: no cell


def _varied_state(located: StepOutcome | None) -> TriageState:
    concurrent = StepOutcome("concurrent", DONE, cells=(_cell("sequential", 0), _cell("concurrent", 0)),
                             schedule_differs=("as_given/capital",), command="concurrent cmd",
                             run_dir="/t/concurrent/run")
    state = TriageState("planted", [], 400, {"floor": StepOutcome("floor", DONE, cells=(_cell("sequential", 0),)),
                                             "concurrent": concurrent})
    if located is not None:
        state.steps[inside.NAME] = located
    return state


def test_the_located_module_is_the_finding_with_the_op_probe_next() -> None:
    line = (f"as_given/capital/concurrent: first split: step 0 (prefill), {PLANTED} (Linear): input identical, "
            "output differs; window of 16 vs 1, M 15 vs 15")
    located = StepOutcome(inside.NAME, DONE, run_dir="/t/concurrent/run", command=LOCATE, answer=(line,),
                          split=f"{PLANTED} (Linear) at step 0")
    found = rank(_varied_state(located), "transformers_hooked")
    [first] = found.findings
    assert first.cause == PLANTED and first.title.endswith(f"it first splits in {PLANTED} (Linear) at step 0")
    assert found.verdict == f"most likely cause: {first.title}"
    assert first.evidence[0] == f"locate (`{LOCATE}`): {line}"
    assert f"`{LOCATE} --probe`" in first.fix_cost and first.command == "concurrent cmd"  # the step's re-run
    assert not any("locate" in line for line in found.not_run) and any("op probes" in n for n in found.not_run)


def test_without_digests_the_op_probes_and_locate_are_named_next() -> None:
    found = rank(_varied_state(None), "vllm")
    [first] = found.findings
    assert first.cause == "variation" and first.title == "variation no switch tried removes (first in concurrent)"
    assert "the op probes (`orchestrator probe`)" in first.fix_cost and "`orchestrator locate`" in first.fix_cost
    assert any("locate" in line for line in found.not_run)


def test_the_locate_step_says_why_it_did_not_locate(tmp_path: Path) -> None:
    assert inside.locate_step(_varied_state(None), "the variation is explained by compile").reason == (
        "the variation is explained by compile")
    quiet = TriageState("planted", [], 400, {"floor": StepOutcome("floor", DONE, cells=(_cell("sequential", 0),))})
    assert inside.locate_step(quiet).reason == "no cell varied to locate"
    state = _varied_state(None)
    state.steps["concurrent"] = StepOutcome(**{**state.steps["concurrent"].__dict__, "run_dir": str(tmp_path)})
    skipped = inside.locate_step(state)  # a run dir without the cell's answers: `locate`'s own line, as the reason
    assert skipped.status == SKIPPED and skipped.reason.startswith("as_given/capital/concurrent: --cell ")
    assert skipped.command == f"orchestrator locate {tmp_path} --cell as_given/capital/concurrent"


def _run_varying_concurrent(step_dir: Path, onset: bool) -> tuple[int, tuple[str, ...]]:
    (step_dir / "run").mkdir(parents=True)
    schedules = [{"arm": "as_given", "prompt_id": "capital", "verdict": "differ"}] if (
        step_dir.name == "concurrent") else []
    cells = [{"arm": "as_given", "phase": phase, "prompt_id": "capital", "n": 4, "divergent": 0,
              "distinct_signatures": 1, "lower_bound_95": 0.0, "upper_bound_95": 0.5}
             for phase in ("sequential", "concurrent")]
    starts = [{"arm": "as_given", "starts": 5, "ready": 5, "failure_upper_95": 0.45, "peak_memory_bytes": {},
               "time_to_ready_s": {}}]
    (step_dir / "run" / "report.json").write_text(json.dumps({"cells": cells, "schedules": schedules,
                                                              "cost": {"starts": starts}}))
    return 0, ("onset in [1, 2] at 95 % (6 jobs, 52 requests)",) if onset else ()


def test_the_procedure_locates_on_a_hooked_engine_only(tmp_path: Path) -> None:
    hooked = procedure.triage(source("transformers_hooked", **{"batch-invariant": True}), SIZING, tmp_path / "h",
                              TriageState("planted", [], 400), _run_varying_concurrent)
    located = hooked.steps[inside.NAME]  # tried on the concurrent step's run dir (here without answers: skipped)
    assert located.status == SKIPPED and located.run_dir == str(tmp_path / "h" / "concurrent" / "run")
    other = procedure.triage(source("reference"), SIZING, tmp_path / "r", TriageState("planted", [], 400),
                             _run_varying_concurrent)
    assert inside.NAME not in other.steps
