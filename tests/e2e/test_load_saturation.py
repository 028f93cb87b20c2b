"""A series to saturation on a server whose capacity is known (study load_saturation): the reference engine one
request at a time (--max-num-seqs 1), each request 4 engine steps of 25 ms planted (--step-delay-ms 25, max_tokens
4, ignore_eos): it answers at most 1 / 0.1 s = 10 requests/s, less by its own compute. The series must stop
early, and the saturation point's bound must hold that capacity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import orchestrator, ran

pytestmark = pytest.mark.docker

STEPS, STEP_S = 4, 0.025  # conf/study/load_saturation.yaml: max_tokens 4 (a prefill and 3 decodes), 25 ms a step
CAPACITY_PER_S = 1 / (STEPS * STEP_S)  # the most it can answer; its compute takes a little more


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, docker_client) -> Path:  # type: ignore[no-untyped-def]
    return ran(tmp_path_factory, "saturation", "study=load_saturation")


def test_the_saturation_point_is_bounded_around_the_known_capacity(run_dir: Path) -> None:
    report = json.loads((run_dir / "report.json").read_text())
    series, = report["cost"]["saturation"]
    points = series["points"]
    assert points[0]["offered_rate_per_s"] is None and not points[0]["over_saturated"]  # one at a time
    assert points[-1]["over_saturated"] and not any(p["over_saturated"] for p in points[:-1]), points
    assert len(points) < series["planned_points"]  # stopped early: the points after it were never sent
    # Above: what a point that kept up reached (no more than the capacity); below: a rate it could not keep up with
    assert series["lower_per_s"] <= CAPACITY_PER_S < series["upper_per_s"], series
    assert series["lower_per_s"] > 0.5 * CAPACITY_PER_S and series["upper_per_s"] < 4 * CAPACITY_PER_S, series
    # the later points' rates come from point 0's latency by Little's law: point 1 offers 8^(1/4) / L
    phases = {p["phase"]: p for p in report["cost"]["phases"]}
    latency_s = phases["saturation@0"]["latency_s"]["avg"]
    assert points[1]["offered_rate_per_s"] == pytest.approx(8 ** 0.25 / latency_s, rel=0.01)
    markdown = (run_dir / "report.md").read_text()
    assert "  - Saturates (saturation): above " in markdown and "## Cost against load, to saturation" in markdown
    assert "incomplete" not in report  # the points never sent are the stop's, not work for `run --resume`


def test_a_resumed_series_decides_as_recorded(run_dir: Path) -> None:
    """Nothing to resume: the stopped series' unsent points are not sent again."""
    result = orchestrator("run", "--resume", str(run_dir))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "nothing to resume" in result.stdout + result.stderr
