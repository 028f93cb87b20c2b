"""`orchestrator triage` from the user's side (issue 49): hidden-mechanism trials in CI size on the reference
engine as processes (a mechanism switched on and found first; nothing switched on and "repeatable in everything
tried"), and once on the reference engine's Docker image. docs/triage.md; the benchmark is bench/triage_trials.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import orchestrator

PROCESS = ["runtime=process", "arm@arms.baseline=reference_process"]
SMALL = ["--target-bound", "0.3", "--start-bound", "0.8", "--long-prompt-tokens", "2400", "--budget-requests", "200"]


def _triage(out: Path, *args: str) -> dict[str, Any]:
    result = orchestrator("triage", *args, *SMALL, "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "findings.md").is_file() and (out / "findings.html").is_file()
    found: dict[str, Any] = json.loads((out / "findings.json").read_text(encoding="utf-8"))
    assert result.stdout.splitlines()[0] == found["verdict"]  # the verdict first
    return found


@pytest.mark.parametrize(("mechanism", "switch"), [
    ("+arms.baseline.engine_args.fused-finalize=true", "fused_finalize"),
    ("+arms.baseline.env.VLLM_BATCH_INVARIANT='0'", "batch_invariant"),
])
def test_a_hidden_mechanism_is_the_first_finding(tmp_path: Path, mechanism: str, switch: str) -> None:
    found = _triage(tmp_path / "t", *PROCESS, mechanism)
    first = found["findings"][0]
    assert first["cause"] == switch and first["kind"] == "switch (removes)"
    step = Path(first["run_dir"]).parent
    assert first["command"] == (step / "COMMAND.txt").read_text(encoding="utf-8").strip()  # the step's re-run
    assert (Path(first["run_dir"]) / "report.json").is_file()


def test_nothing_switched_on_is_repeatable_in_everything_tried_with_its_bound(tmp_path: Path) -> None:
    found = _triage(tmp_path / "t", *PROCESS)
    assert found["verdict"].startswith("repeatable in everything tried: 0 divergent of ")
    assert found["findings"] == [] and found["divergent"] == 0 and 0 < found["upper_95"] < 0.2


def test_an_arm_the_study_lacks_is_one_line_naming_its_arms() -> None:
    result = orchestrator("triage", *PROCESS, "--arm", "basline", "--plan")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "did you mean 'baseline'" in result.stderr.lower() and "baseline" in result.stderr


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_triage_of_the_reference_engine_image_names_its_fused_finalize(tmp_path: Path) -> None:
    found = _triage(tmp_path / "t", "arm@arms.baseline=reference_fused")
    assert found["findings"][0]["cause"] == "fused_finalize"
