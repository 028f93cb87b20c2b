"""A control arm of higher precision (study control_precision): the reference engine in bfloat16 against the same
requests in float32. The report gives each arm's drift from the control, and it is real: bf16 parts from fp32
somewhere (its logprobs differ), and bf16's A/A drifts exactly as bf16 does (the same engine, the same answers)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import orchestrator

pytestmark = pytest.mark.docker


def test_each_arm_s_drift_from_the_float32_control(tmp_path, docker_client) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    result = orchestrator("run", "study=control_precision", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    drift = json.loads((run_dir / "report.json").read_text())["control_drift"]
    by = {(d["arm"], d["prompt_id"], d["phase"]): d for d in drift}
    assert {arm for arm, _, _ in by} == {"bf16", "bf16_aa"} and all(d["control"] == "fp32" for d in drift)
    bf16 = [d for (arm, _, _), d in by.items() if arm == "bf16"]
    assert all(d["max_logprob_drift"] is not None for d in bf16)
    assert any(d["max_logprob_drift"] > 0 for d in bf16)  # bfloat16 is not float32
    for (arm, prompt, phase), d in by.items():
        if arm == "bf16_aa":
            mine = by[("bf16", prompt, phase)]
            assert (d["first_token_split"], d["max_logprob_drift"]) == (mine["first_token_split"],
                                                                        mine["max_logprob_drift"])
    assert "## Drift from the control `fp32`" in (run_dir / "report.md").read_text()
