"""runtime.stop_behind_next_start: an arm's stop runs while the next arm starts, the next arm sends nothing until
that stop has ended, and arms that share a GPU, a cache or a port, process arms, Ctrl-C and the last arm stop first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.run.arm.stop_behind import StopsBehind, may_stop_behind
from orchestrator.run.study import StudyRunner
from orchestrator.runtime.fake import FakeRuntime
from orchestrator.runtime.spec import Handle
from tests.fake_engine import fake_runtime

STOP_S = 0.3


def study(*overrides: str) -> config.Config:
    typed = config.to_typed(config.compose(["protocol=smoke", *overrides]))
    for arm in typed.arms.values():
        arm.image, arm.build.context = "fake-engine", None
    return typed


class SlowStop(FakeRuntime):
    """The fake, whose engines take STOP_S to exit, as a container's teardown does; `fail` makes a stop fail."""

    fail = False

    def stop(self, handle: Handle, timeout_s: float) -> int | None:
        time.sleep(STOP_S)
        if self.fail:
            raise RuntimeError("the daemon broke while stopping")
        return super().stop(handle, timeout_s)


def slow_runtime() -> SlowStop:
    runtime = fake_runtime()
    runtime.__class__ = SlowStop
    return runtime  # type: ignore[return-value]


def ran(typed: config.Config, tmp_path: Path, runtime: FakeRuntime | None = None
        ) -> tuple[dict[str, dict], list[dict], dict[str, float]]:  # type: ignore[type-arg]
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-behind", runtime or slow_runtime(), say=lambda _: None)
    try:
        runner.run()
    finally:
        runner.cleanup()
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    return arms, read_table(paths, "responses").to_pylist(), runner.timer.seconds


def test_the_next_arm_starts_while_the_last_one_stops_and_sends_only_once_it_has(tmp_path: Path) -> None:
    arms, rows, seconds = ran(study(), tmp_path)
    first, second = arms["baseline"], arms["wide_batch"]
    assert {a["status"] for a in arms.values()} == {"completed"}
    assert second["start_ns"] < first["stop_ns"]  # started behind the stop
    assert min(r["send_ns"] for r in rows if r["arm"] == "wide_batch") >= first["stop_ns"]  # sent after it
    assert seconds["stop_behind_next_start"] >= STOP_S and seconds["stop_and_logs"] >= STOP_S  # the last arm's


@pytest.mark.parametrize("overrides", [
    ("runtime.stop_behind_next_start=false",),
    ("arms.baseline.gpus=0", "arms.wide_batch.gpus=all"),  # the next engine's memory check would see it held
    ("arms.baseline.network_host=true", "arms.wide_batch.network_host=true"),  # one port
])
def test_arms_that_share_what_a_stop_holds_stop_first(tmp_path: Path, overrides: tuple[str, ...]) -> None:
    arms, _, seconds = ran(study(*overrides), tmp_path)
    assert arms["wide_batch"]["start_ns"] > arms["baseline"]["stop_ns"]
    assert "stop_behind_next_start" not in seconds


def test_who_may_stop_behind() -> None:
    assert may_stop_behind(study(), "baseline", "wide_batch")
    assert not may_stop_behind(study(), "wide_batch", None)  # the last arm: the report reads its logs
    assert not may_stop_behind(study("runtime=process"), "baseline", "wide_batch")  # it may hold every GPU
    assert may_stop_behind(study("arms.baseline.gpus='0'", "arms.wide_batch.gpus='1'"), "baseline", "wide_batch")


def test_a_later_start_of_the_same_arm_waits_for_the_first_one_s_stop(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(study("study.starts=2", "~arms.wide_batch"), paths, "run-starts", slow_runtime(),
                         say=lambda _: None)
    runner.run()
    runner.cleanup()
    starts = sorted(read_table(paths, "arms").to_pylist(), key=lambda row: row["start"])
    assert starts[1]["start_ns"] > starts[0]["stop_ns"]  # one engine config, one cache: never behind itself


def test_a_failed_stop_fails_the_run_after_both_rows_land(tmp_path: Path) -> None:
    runtime = slow_runtime()
    runtime.fail = True
    with pytest.raises(RuntimeError, match="broke while stopping"):
        ran(study(), tmp_path, runtime)
    arms = read_table(RunPaths(tmp_path / "run"), "arms").to_pylist()
    assert sorted(a["arm"] for a in arms) == ["baseline", "wide_batch"]


def test_a_stop_s_failure_is_kept_until_asked_for() -> None:
    stops = StopsBehind()
    done: list[str] = []

    def broken() -> None:
        raise ValueError("no")

    stops.submit(broken)
    stops.wait()  # what the next arm does: no raise there, the failure is not that arm's
    stops.submit(lambda: done.append("second"))
    with pytest.raises(ValueError, match="no"):
        stops.raise_failure()
    stops.close()
    assert done == ["second"]
