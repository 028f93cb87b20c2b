"""Triage's load point (its `load` step, triage/steps.py) on canned run dirs: sized from the floor's bound within
the budget, skipped and said so where the budget cannot hold it, its divergence counted with the other steps', its
cost with intervals over its windows on the findings page, and the switches' A/Bs run at it where only it varied."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.analysis.stats import upper_bound_zero
from orchestrator.triage import procedure, steps
from orchestrator.triage.findings import rank
from orchestrator.triage.observe import load_cost
from orchestrator.triage.page import to_markdown
from orchestrator.triage.runner import Source
from orchestrator.triage.state import DONE, SKIPPED, TriageState

SIZING = steps.Sizing(target_bound=0.1, start_bound=0.5, budget_requests=400, long_prompt_tokens=3000)
PHASE = {"arm": "as_given", "phase": "load", "load_point": "closed loop of 16",
         "request_throughput_per_s": {"avg": 40.0}, "output_tokens_per_s": {"avg": 600.0},
         "latency_s": {"p50": 0.3, "p99": 0.5}, "per_window": {"request_throughput_per_s": [38.0, 40.0, 42.0, 40.0],
                                                                "output_tokens_per_s": [600.0, 600.0, 600.0, None]}}


def source(**engine_args: object) -> Source:
    arm = {"engine": "reference", "engine_args": {"max-num-seqs": 16, **engine_args}, "env": {}}
    return Source("baseline", arm, {"kind": "process"}, {"prompts": {"capital": {"text": "a"}, "count": {"text": "b"}}},
                  {"max_tokens": 8}, "completions")


def test_the_load_point_has_as_many_probes_as_the_floor_has_requests_and_stays_in_its_budget() -> None:
    planned = steps.load_step(source(), SIZING)
    load = planned.spec.protocol["phases"]["load"]["load"]
    assert load["concurrency"] == 16 and load["rate_per_s"] is None  # a closed loop of the engine's batch size
    probes = load["requests"] * load["windows"] // load["probe_every"]
    assert upper_bound_zero(probes) <= SIZING.target_bound  # bounds divergence as the floor does
    assert load["warmup"]["extend_windows"] == 0  # no windows sent past the planned ones
    assert planned.requests == load["requests"] * load["windows"] + load["warmup"]["requests"]
    cut = steps.scaled(planned, planned.requests // 2)
    assert cut is not None and cut.spec.protocol["phases"]["load"]["load"]["requests"] * 4 + 4 <= planned.requests // 2
    assert steps.scaled(planned, 20) is None  # not two probes a window


def test_its_cost_has_an_interval_over_the_windows_of_the_arm_as_given() -> None:
    said = load_cost({"cost": {"phases": [PHASE, {**PHASE, "arm": "other"}]}})
    # Student's t over the windows measured (t(3) = 3.18, sd 1.63 / 2); a window without a value left out
    assert said == ("at closed loop of 16: 40 requests/s (37.4-42.6 at 95 % over 4 windows), 600 output tokens/s "
                    "(600-600 at 95 % over 3 windows), 0.3 s latency p50, 0.5 s latency p99",)


def _run(varies_at_load: bool) -> procedure.Run:
    def run(step_dir: Path, onset: bool) -> tuple[int, tuple[str, ...]]:
        (step_dir / "run").mkdir(parents=True)
        load = "load" in (step_dir / "config" / "protocol" / "triage_step.yaml").read_text()
        cells = [{"arm": arm, "phase": "load" if load else "sequential", "prompt_id": "capital", "n": 12,
                  "divergent": 3 if load and varies_at_load and arm == "as_given" else 0,
                  "distinct_signatures": 1, "lower_bound_95": 0.0, "upper_bound_95": 0.3}
                 for arm in ("as_given", "fused_finalize_repeatable")]
        starts = [{"arm": "as_given", "starts": 5, "ready": 5, "failure_upper_95": 0.45, "peak_memory_bytes": {},
                   "time_to_ready_s": {}}]
        report = {"cells": cells if step_dir.name.startswith("switch_") else cells[:1],
                  "cost": {"starts": starts, "phases": [PHASE] if load else []}}
        (step_dir / "run" / "report.json").write_text(json.dumps(report), encoding="utf-8")
        return 0, ()
    return run


def test_the_load_point_s_divergence_and_cost_reach_the_findings(tmp_path: Path) -> None:
    state = procedure.triage(source(), SIZING, tmp_path, TriageState("baseline", [], 400), _run(False))
    loaded = state.steps["load"]
    assert loaded.status == DONE and loaded.requests == steps.load_step(source(), SIZING).requests  # all it sent
    found = rank(state, "reference")
    assert found.load_cost == loaded.load_cost and "over 4 windows" in found.load_cost[0]
    assert f"over {len(state.steps) - 1} steps" in found.verdict  # counted with the others (the onset has no cells)
    page = to_markdown(found)
    assert "## What the arm costs at its load point" in page and f"- {found.load_cost[0]}" in page


def test_a_budget_that_cannot_hold_the_load_point_skips_it_and_says_so(tmp_path: Path) -> None:
    state = procedure.triage(source(), SIZING, tmp_path, TriageState("baseline", [], 70), _run(False))
    assert state.steps["load"].status == SKIPPED and state.steps["load"].reason.startswith("the budget's ")
    found = rank(state, "reference")
    assert found.load_cost == () and "load" in found.verdict.split("; not tried: ")[1].split(", ")
    assert "What the arm costs" not in to_markdown(found)


def test_where_only_the_load_point_varied_the_switches_are_tried_at_it(tmp_path: Path) -> None:
    arm = source(**{"fused-finalize": True})
    state = procedure.triage(arm, SIZING, tmp_path, TriageState("baseline", [], 2000), _run(True))
    assert state.steps["switch_fused_finalize"].status == DONE
    ab = (tmp_path / "switch_fused_finalize" / "config" / "protocol" / "triage_step.yaml").read_text()
    assert "kind: load" in ab
    assert rank(state, "reference").findings[0].cause == "fused_finalize"
