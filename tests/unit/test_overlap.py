"""runtime.overlap_arm_starts: the next arm starts during the current one's sequential phases, never during
a concurrent batch, and the guard refuses arms that share a GPU, a cache or a host port."""

from __future__ import annotations

from pathlib import Path

from orchestrator import config
from orchestrator.config.schema import ScratchConfig
from orchestrator.guard import overlap
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.run.study import StudyRunner
from tests.fake_engine import fake_runtime


def study(*overrides: str) -> config.Config:
    typed = config.to_typed(config.compose(["protocol=smoke", "runtime.overlap_arm_starts=true", *overrides]))
    for arm in typed.arms.values():
        arm.image, arm.build.context = "fake-engine", None
    return typed


def test_the_next_arm_starts_in_the_sequential_phase_and_is_ready_before_any_batch(tmp_path: Path) -> None:
    typed = study()
    paths = RunPaths(tmp_path / "run")
    said: list[str] = []
    runner = StudyRunner(typed, paths, "run-overlap", fake_runtime(), say=said.append)
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert {a["status"] for a in arms.values()} == {"completed"}
    assert arms["wide_batch"]["started_during"] == "baseline" and arms["baseline"]["started_during"] is None
    rows = [r for r in read_table(paths, "responses").to_pylist() if r["arm"] == "baseline"]
    [cold] = [r for r in rows if r["role"] == "cold"]
    first_batch = min(r["send_ns"] for r in rows if r["phase_kind"] == "concurrent")
    assert cold["recv_ns"] <= arms["wide_batch"]["start_ns"] < arms["baseline"]["stop_ns"]  # after the cold one
    assert arms["wide_batch"]["ready_ns"] <= first_batch  # nothing loads during a batch
    assert any("starting early, while baseline runs" in line for line in said)


def test_without_the_options_arms_run_one_after_the_other(tmp_path: Path) -> None:
    typed = study("runtime.overlap_arm_starts=false", "runtime.stop_behind_next_start=false")
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-serial", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert arms["wide_batch"]["start_ns"] > arms["baseline"]["stop_ns"] and arms["wide_batch"]["started_during"] is None


def test_the_guard_refuses_arms_that_share_a_device_a_cache_or_a_port() -> None:
    assert overlap.problems(study()) == []
    assert overlap.problems(study("runtime.overlap_arm_starts=false", "arms.baseline.gpus=0",
                                  "arms.wide_batch.gpus=0")) == []  # not asked for: nothing to refuse
    [gpu] = overlap.problems(study("arms.baseline.gpus=all", "arms.wide_batch.gpus='1'"))
    assert "share GPUs (all and 1)" in gpu and "runtime.overlap_arm_starts=false" in gpu
    assert overlap.problems(study("arms.baseline.gpus='0'", "arms.wide_batch.gpus='1'")) == []
    shared = study()
    for arm in shared.arms.values():
        arm.scratch["tune"] = ScratchConfig(container="/tune", share="t")
    [scratch] = overlap.problems(shared)
    assert "scratch dir 't'" in scratch
    [port] = overlap.problems(study("arms.baseline.network_host=true", "arms.wide_batch.network_host=true"))
    assert "host port 8000" in port
