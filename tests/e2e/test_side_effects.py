"""The side-effect audit against the real reference engine (study deterministic_side_effects): an A/B of
--deterministic, which also widens the batch window, names the window as what else it changed, in report.md,
report.json and report.html; an A/B of batch invariance alone names nothing. In Docker as CI runs it, and as
processes (runtime=process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import orchestrator

PROCESS = ["runtime=process", *(f"arm@arms.{arm}=reference_process" for arm in ("variant", "deterministic",
                                                                               "invariant"))]


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_in_docker(tmp_path: Path) -> None:
    _check(tmp_path)


def test_as_processes(tmp_path: Path) -> None:
    _check(tmp_path, *PROCESS)


def _check(tmp_path: Path, *runtime: str) -> None:
    result = orchestrator("run", "study=deterministic_side_effects", f"hydra.run.dir={tmp_path}", *runtime)
    assert result.returncode == 0, result.stderr[-3000:]
    audits = {a["arm_b"]: a for a in json.loads((tmp_path / "report.json").read_text())["side_effects"]}
    assert set(audits) == {"deterministic", "invariant"} and {a["arm_a"] for a in audits.values()} == {"variant"}
    window = audits["deterministic"]["moved"]
    assert [(m["kind"], m["name"], m["a"], m["b"]) for m in window] == [
        ("observed", "log_facts.batch_window_ms", "20", "50")]
    assert {"log_facts.batch_invariant", "log_facts.deterministic"} <= \
        {m["name"] for m in audits["deterministic"]["explained"]}
    assert audits["invariant"]["moved"] == [] and audits["invariant"]["unknown"] == []
    page = (tmp_path / "report.md").read_text()
    assert ("| deterministic vs variant | engine_args.deterministic | "
            "**observed: log_facts.batch_window_ms (20 -> 50)**") in page
    assert "| invariant vs variant | engine_args.batch-invariant | nothing |" in page
    assert "What else it changed" in (tmp_path / "report.html").read_text()
