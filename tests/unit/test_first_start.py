"""`run` starts the first arm before Hydra records the run dir (run/first_start.py); `StudyRunner.run` takes that
start up as the arm's own: each arm started once, every request one row. Fake runtime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.run.first_start import FirstStartRunner
from tests.fake_engine import fake_runtime
from tests.unit.test_run_fake import study


def test_the_first_arm_started_early_is_started_once_and_every_request_has_one_row(tmp_path: Path) -> None:
    typed, runtime = study(None), fake_runtime()
    paths = RunPaths(tmp_path / "run")
    runner = FirstStartRunner(typed, paths, "run-fake", runtime, say=lambda _: None)
    runner.start_first()
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert {a["status"] for a in arms.values()} == {"completed"}
    assert sorted(a["container_id"] for a in arms.values()) == ["fake-1", "fake-2"]  # two starts, no more
    assert arms["baseline"]["start_ns"] < arms["baseline"]["ready_ns"] < arms["wide_batch"]["start_ns"]
    responses = read_table(paths, "responses", ["arm", "request_id"]).to_pylist()
    assert len(responses) == 2 * (1 + len(typed.prompts.prompts) * (6 + 4 * 2))
    assert set(Counter((r["arm"], r["request_id"]) for r in responses).values()) == {1}
