"""study.parallel_arms: placement over a fake 8-GPU inventory (arms of 1, 2 and 8 GPUs, waves), disjoint cores,
and a study run on FakeRuntime with its arms side by side, their placement in the record and the report."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator import config
from orchestrator.errors import ConfigError
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import read
from orchestrator.record.tables import read_table
from orchestrator.report.environment import environment, markdown_section
from orchestrator.run import placement
from orchestrator.run.placement import Needs, place
from orchestrator.run.study import StudyRunner
from orchestrator.runtime.spec import Gpu, Inventory, cpuset_text, parse_cpuset
from tests.fake_engine import fake_runtime

EIGHT_GPUS = Inventory(cpus=tuple(range(16)), gpus=tuple(Gpu(i, f"GPU-{i:04d}", "H200") for i in range(8)),
                       memory_bytes=64 << 30)


def shape(waves: list[list[placement.Placement]]) -> list[list[tuple[str, tuple[int, ...]]]]:
    return [[(p.arm, p.gpus) for p in wave] for wave in waves]


def test_arms_of_one_two_and_eight_gpus_share_the_box_in_waves() -> None:
    needs = [Needs("one", gpu_count=1), Needs("two", gpu_count=2), Needs("eight", gpu_count=8),
             Needs("one_more", gpu_count=1)]
    waves = place(needs, {"local": EIGHT_GPUS}, parallel=None)
    # the 8-GPU arm cannot share the box: it waits for a wave of its own; the next 1-GPU arm fills in beside
    assert shape(waves) == [[("one", (0,)), ("two", (1, 2)), ("one_more", (3,))], [("eight", tuple(range(8)))]]
    assert waves[0][1].gpu_uuids == ("GPU-0001", "GPU-0002")
    assert [p.wave for wave in waves for p in wave] == [1, 1, 1, 2]


def test_parallel_limit_caps_a_wave_and_named_ids_must_be_free() -> None:
    needs = [Needs("a", gpu_count=1), Needs("b", gpu_count=1), Needs("c", gpu_count=1)]
    assert shape(place(needs, {"local": EIGHT_GPUS}, parallel=2)) == [[("a", (0,)), ("b", (1,))], [("c", (0,))]]
    named = [Needs("x", gpu_ids=(0, 1)), Needs("y", gpu_ids=(1,)), Needs("z", gpu_ids=(2,))]
    assert shape(place(named, {"local": EIGHT_GPUS}, parallel=None)) == [[("x", (0, 1)), ("z", (2,))],
                                                                          [("y", (1,))]]
    every = [Needs("all1", all_gpus=True), Needs("cpu_only", cpus=2), Needs("all2", all_gpus=True)]
    waves = place(every, {"local": EIGHT_GPUS}, parallel=None)
    assert [[p.arm for p in wave] for wave in waves] == [["all1", "cpu_only"], ["all2"]]


def test_cores_are_disjoint_and_hosts_are_filled_evenly() -> None:
    two_cores = Inventory(cpus=(0, 1))
    needs = [Needs(name, cpus=1) for name in "abcd"]
    waves = place(needs, {"local": two_cores, "ssh://other": two_cores}, parallel=None)
    [wave] = waves
    by_host: dict[str, list[tuple[int, ...]]] = {}
    for p in wave:
        by_host.setdefault(p.host, []).append(p.cpus)
    assert by_host == {"local": [(0,), (1,)], "ssh://other": [(0,), (1,)]}
    assert [p.host for p in wave] == ["local", "ssh://other", "local", "ssh://other"]  # spread, not stacked
    # one host of two cores: two waves of two
    assert [[p.arm for p in w] for w in place(needs, {"local": two_cores}, None)] == [["a", "b"], ["c", "d"]]
    # an arm that names its engine runs there only
    pinned = place([Needs("p", cpus=1, host="ssh://other")], {"local": two_cores, "ssh://other": two_cores}, None)
    assert pinned[0][0].host == "ssh://other"


def test_memory_limits_add_up_per_host() -> None:
    host = Inventory(cpus=(0, 1, 2, 3), memory_bytes=10 << 30)
    needs = [Needs("a", memory_bytes=6 << 30), Needs("b", memory_bytes=6 << 30), Needs("c", memory_bytes=4 << 30)]
    assert [[p.arm for p in w] for w in place(needs, {"local": host}, None)] == [["a", "c"], ["b"]]


def test_an_arm_that_fits_nowhere_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError) as caught:
        place([Needs("huge", gpu_count=9)], {"local": EIGHT_GPUS}, None)
    assert "arm 'huge' needs 9 GPUs" in str(caught.value) and "runtime.hosts" in str(caught.value)


def test_cpuset_text_round_trips() -> None:
    assert cpuset_text((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert parse_cpuset("0-2,5,7-8") == (0, 1, 2, 5, 7, 8)


def study(*overrides: str) -> config.Config:
    typed = config.to_typed(config.compose(["protocol=smoke", *overrides]))
    for arm in typed.arms.values():
        arm.image, arm.build.context = "fake-engine", None
    return typed


def test_validation_of_parallel_arms_and_gpu_count() -> None:
    from orchestrator.config.validate import validate

    assert not [p for p in validate(study("study.parallel_arms=auto")) if "parallel_arms" in p]
    [bad] = [p for p in validate(study("study.parallel_arms=many")) if "parallel_arms" in p]
    assert "auto or an integer >= 1" in bad
    [both] = [p for p in validate(study("study.parallel_arms=2", "runtime.overlap_arm_starts=true"))
              if "overlap_arm_starts" in p]
    assert "study.parallel_arms=1" in both
    [twice] = [p for p in validate(study("arms.baseline.gpus='0'", "arms.baseline.gpu_count=1")) if "gpu_count" in p]
    assert "keep gpus or gpu_count" in twice


def test_a_study_runs_its_arms_side_by_side_and_records_where(tmp_path: Path) -> None:
    typed = study("study.parallel_arms=auto", "arms.baseline.cpus=1", "arms.wide_batch.cpus=1",
                  "arms.baseline.gpu_count=1", "arms.wide_batch.gpu_count=2")
    paths = RunPaths(tmp_path / "run")
    said: list[str] = []
    runtime = fake_runtime(EIGHT_GPUS)
    # Each arm's start waits for the other's: arms run one after the other would break the barrier.
    both_started, start = threading.Barrier(2, timeout=60), runtime.start

    def start_together(*args: Any, **kwargs: Any) -> Any:
        handle = start(*args, **kwargs)
        both_started.wait()
        return handle

    runtime.start = start_together  # type: ignore[method-assign]
    runner = StudyRunner(typed, paths, "run-parallel", runtime, say=said.append)
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert {a["status"] for a in arms.values()} == {"completed"}
    assert (arms["baseline"]["wave"], arms["wide_batch"]["wave"]) == (1, 1)
    assert arms["baseline"]["gpu_uuids"] == ["GPU-0000"] and arms["wide_batch"]["gpu_uuids"] == ["GPU-0001", "GPU-0002"]
    assert (arms["baseline"]["cpuset"], arms["wide_batch"]["cpuset"]) == ("0", "1")
    assert "--cpuset-cpus 1" in arms["wide_batch"]["docker_run"] and "device=1,2" in arms["wide_batch"]["docker_run"]
    assert any("wave 1/1: baseline, wide_batch at the same time" in line for line in said)
    text = "\n".join(markdown_section(environment(read(paths))))
    assert "wave 1: baseline (local, GPU GPU-0000, cores 0), wide_batch (local, GPU GPU-0001, GPU-0002, cores 1)" \
        in text


def test_a_limit_of_one_at_a_time_runs_in_waves(tmp_path: Path) -> None:
    typed = study("study.parallel_arms=1")
    assert not placement.uses_placement(typed)
    typed = study("study.parallel_arms=auto", "arms.baseline.cpus=2", "arms.wide_batch.cpus=2")
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-waves", fake_runtime(Inventory(cpus=(0, 1))), say=lambda _: None)
    runner.run()
    runner.cleanup()
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert (arms["baseline"]["wave"], arms["wide_batch"]["wave"]) == (1, 2)
    assert arms["wide_batch"]["start_ns"] > arms["baseline"]["stop_ns"]


def test_plan_prints_each_arm_s_command_with_the_cores_and_gpus_its_wave_gives_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.run import plan

    monkeypatch.setattr(plan, "runtime_for", lambda *_: fake_runtime(EIGHT_GPUS))
    typed = study("study.parallel_arms=auto", "arms.baseline.cpus=1", "arms.wide_batch.cpus=1",
                  "arms.baseline.gpu_count=1", "arms.wide_batch.gpu_count=2")
    commands = {line.split("--name RUN_ID-")[1].split()[0]: line
                for line in plan.render(typed).splitlines() if line.startswith("docker run")}
    assert "--gpus device=0 --cpuset-cpus 0 " in commands["baseline"]
    assert "--gpus device=1,2 --cpuset-cpus 1 " in commands["wide_batch"]
    one_by_one = plan.render(study()).splitlines()
    assert not any("--cpuset-cpus" in line or "--gpus" in line for line in one_by_one)
