"""protocol.stop_after_divergences on the real reference engine: the fused-finalize arm varies call to call, so
its cells stop at their first divergence while the unfused arm's run their full n; report.md says the rule, and
`plan --like` the run estimates engine time from its record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]

REPEATS = 12


def test_a_diverging_arm_stops_early_and_the_report_says_the_rule(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = orchestrator("run", f"hydra.run.dir={run}", "study=fused_finalize",
                          f"protocol.phases.sequential.repeats={REPEATS}", "protocol.stop_after_divergences=1")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in pq.read_table(run / "data" / "responses").to_pylist() if r["role"] == "measured"]
    sent = {arm: sum(r["arm"] == arm for r in rows) for arm in ("unfused", "fused")}
    assert sent["unfused"] == 2 * REPEATS  # one signature: full n
    assert 2 * 2 <= sent["fused"] < 2 * REPEATS  # each cell stopped at its first divergence
    report = json.loads((run / "report.json").read_text())
    for cell in report["cells"]:
        if cell["arm"] == "fused":
            assert cell["stopped_after"] == 1 and cell["divergent"] == 1 and cell["upper_bound_95"] is None
            assert cell["lower_bound_95"] > 0
        else:
            assert cell["stopped_after"] is None and cell["divergent"] == 0 and cell["upper_bound_95"] > 0
    markdown = (run / "report.md").read_text()
    assert "protocol.stop_after_divergences=1: 2 of 4 cells stopped" in markdown
    assert "divergence shown; rate >= " in markdown and "not estimated beyond this lower bound" in markdown
    assert not any(h.startswith("INCOMPLETE") for h in report["headline"])  # what was not sent is not missing

    resumed = orchestrator("run", "--resume", str(run))
    assert resumed.returncode == 0 and "nothing to resume" in resumed.stderr, resumed.stderr[-2000:]

    plan = orchestrator("plan", "study=fused_finalize", f"protocol.phases.sequential.repeats={REPEATS}",
                        "protocol.stop_after_divergences=1", "--like", str(run))
    assert plan.returncode == 0, plan.stderr
    times = re.findall(r"# arm (\w+) expected engine time: at most ([0-9.e+-]+) s", plan.stdout)
    assert {arm for arm, _ in times} == {"unfused", "fused"} and all(float(s) > 0 for _, s in times)
    assert f"# arm fused requests: at most {1 + 2 * REPEATS} " in plan.stdout
