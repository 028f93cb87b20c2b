"""A planted cost, measured (study load_planted_cost): the reference engine with every engine step 20 ms slower
in one arm. The load point's cost must show it, at about the planted size, and nothing else may change."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, orchestrator, ran
from tests.unit.test_aiperf_export import AIPERF_PYTHON, NO_AIPERF

pytestmark = pytest.mark.docker

PLANTED_S = 0.020  # conf/study/load_planted_cost.yaml: --step-delay-ms 20


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, docker_client) -> Path:  # type: ignore[no-untyped-def]
    return ran(tmp_path_factory, "cost", "study=load_planted_cost")


@pytest.fixture(scope="module")
def report(run_dir: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run_dir / "report.json").read_text())  # type: ignore[no-any-return]


def test_the_planted_step_delay_is_measured_at_its_size(report: dict) -> None:  # type: ignore[type-arg]
    phases = {p["arm"]: p for p in report["cost"]["phases"]}
    base, slow = phases["baseline"]["inter_token_latency_s"], phases["slow"]["inter_token_latency_s"]
    # Each token after the first costs one more engine step: its gap grows by the planted delay.
    grown_s = slow["p50"] - base["p50"]
    assert 0.8 * PLANTED_S <= grown_s <= 1.5 * PLANTED_S, (base, slow)
    ratios = {r["metric"]: r for r in report["cost"]["ratios"]
              if (r["arm_a"], r["arm_b"], r["phase"]) == ("baseline", "slow", "load")}
    itl = ratios["inter_token_latency_s"]
    # The ratio is over the windows' mean gaps: planted on the baseline's own windows, it would read so.
    base_windows = phases["baseline"]["per_window"]["inter_token_latency_s"]
    expected = statistics.geometric_mean([w + PLANTED_S for w in base_windows]) / statistics.geometric_mean(
        base_windows)
    assert itl["ratio"] == pytest.approx(expected, rel=0.25), (itl, expected)
    assert itl["lower_95"] > 1 and ratios["latency_s"]["lower_95"] > 1  # the interval says it costs


def test_a_cost_is_not_a_divergence(report: dict) -> None:  # type: ignore[type-arg]
    """The planted delay slows every step alike: the answers stay the same, and the rates read so."""
    pairs = [p for p in report["pairs"] if p["arm_b"] == "slow"]
    assert pairs and all(p["verdict"] == "identical" for p in pairs), pairs
    for cell in report["cells"]:
        assert cell["distinct_signatures"] == 1, cell
    for rate in report["cost"]["rates"]:
        assert rate["verdict"] == "not shown lower" and rate["k_a"] == rate["k_b"] == 0, rate


def test_its_load_points_are_read_by_aiperfs_own_reader(run_dir: Path, report: dict) -> None:  # type: ignore[type-arg]
    """`compare --export aiperf` on a real run, as a user runs it; AIPerf's models and plot loader read it where
    AIPerf is installed, and its figures are the report's."""
    result = orchestrator("compare", str(run_dir), "--export", "aiperf")
    assert result.returncode == 0 and f"AIPerf profile export: {run_dir / 'aiperf'}" in result.stderr, result.stderr
    phases = {p["arm"]: p for p in report["cost"]["phases"]}
    for arm in ("baseline", "slow"):
        summary = json.loads((run_dir / "aiperf" / arm / "load" / "profile_export_aiperf.json").read_text())
        assert summary["request_latency"]["p50"] == pytest.approx(1e3 * phases[arm]["latency_s"]["p50"])
        assert summary["time_to_first_token"]["count"] == phases[arm]["time_to_first_token_s"]["count"]
    if not AIPERF_PYTHON.is_file():
        pytest.skip(NO_AIPERF)
    done = subprocess.run([str(AIPERF_PYTHON), str(ROOT / "tests/aiperf_reader.py"), str(run_dir / "aiperf")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout)
    assert sorted(read) == ["baseline/load", "slow/load"]
    for arm in ("baseline", "slow"):
        mine = read[f"{arm}/load"]
        assert mine["records"] == mine["loaded_rows"] == phases[arm]["requests"]
        assert mine["request_latency_again"]["p99"] == pytest.approx(mine["request_latency"]["p99"])
