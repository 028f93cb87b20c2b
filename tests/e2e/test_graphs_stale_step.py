"""Ground truth for the seed's stale-step defect (issue 48): the reference engine's simulated CUDA-graph capture,
found by the A/B graphs on vs off, and its fix repeatable and equal to graph-off (conf/study/graphs_stale_step.yaml,
docs/mechanisms.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_mechanisms import distinct, run_study

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def test_graph_capture_is_found_by_the_ab_and_its_fix_repeats_and_matches_graph_off(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=graphs_stale_step", "protocol.phases.sequential.repeats=10",
                       "protocol.phases.concurrent.batches=3")
    verdicts = {(p["arm_b"], p["prompt_id"], p["phase"]): p["verdict"] for p in report["pairs"]}
    cells = [(prompt, phase) for prompt in ("capital", "count") for phase in ("sequential", "concurrent")]
    assert all(verdicts["graphs", *cell] == "differ" for cell in cells), verdicts  # every decode step read stale
    assert any(distinct(report, "graphs", *cell) > 1 for cell in cells)  # and what ran before shows through
    assert not next(c for c in report["cold"] if c["arm"] == "graphs")["matches_warm"]  # the capture's zeros
    for cell in cells:  # the fix: repeatable, and graph-off's answers bit for bit
        assert distinct(report, "fixed", *cell) == 1 and distinct(report, "eager", *cell) == 1
        assert verdicts["fixed", *cell] == "identical"
    assert all(s["verdict"] == "identical" for s in report["schedules"] if s["arm"] != "graphs")
