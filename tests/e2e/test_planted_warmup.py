"""A server slow for its first requests (study load_planted_warmup, refengine's planted warm-up): the run extends
the load point's warm-up by further windows (load.warmup.extend_windows) until its steady part has the windows
planned, the cost keeps the slow part out (or says the load point is not steady), and the steady part's ratio is
the truth, 1."""

from __future__ import annotations

import json

import pytest

from tests.conftest import orchestrator

pytestmark = pytest.mark.docker

SLOW_WINDOWED = 25 - 1 - 4  # conf/study/load_planted_warmup.yaml: 25 slow, less the cold request and load.warmup


def test_the_warm_up_is_kept_out_and_the_steady_ratio_is_the_truth(tmp_path, docker_client) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    result = orchestrator("run", "study=load_planted_warmup", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    # the further windows a load point did not need were never sent, and are not missing
    again = orchestrator("run", "--resume", str(run_dir))
    assert again.returncode == 0 and "nothing to resume" in again.stderr, again.stderr[-2000:]
    cost = json.loads((run_dir / "report.json").read_text())["cost"]
    warming = next(p for p in cost["phases"] if p["arm"] == "warming")
    opening = (run_dir / "report.md").read_text().split("## Verdict")[0]
    if not warming["steady"]["steady"]:
        assert "not steady; warm up longer" in opening, opening
        return
    steady = warming["steady"]
    assert steady["requests_kept_out"] >= SLOW_WINDOWED, steady
    # the slow part took counted windows, so the run sent further ones, until 6 steady windows (the plan's)
    assert steady["windows_added"] and steady["windows_added"][0] == 6 and len(steady["windows"]) >= 6, steady
    added = len(steady["windows_added"])
    assert f"({steady['requests_kept_out']} kept out as warm-up, {added} window{'s' * (added > 1)} added until " \
           "steady)" in opening, opening
    ratios = {r["metric"]: r for r in cost["ratios"] if (r["arm_b"], r["phase"]) == ("warming", "load")}
    for metric in ("latency_s", "inter_token_latency_s"):
        assert ratios[metric]["ratio"] == pytest.approx(1.0, abs=0.1), ratios[metric]
