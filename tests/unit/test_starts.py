"""study.starts on the fake runtime: each later start is a fresh engine, waited ready, sent one request per prompt
and stopped; a start that fails is recorded failed, fails the arm, and the next start still runs."""

from __future__ import annotations

from pathlib import Path

from orchestrator import config
from orchestrator.analysis.compare import compare
from orchestrator.config.schema import Config
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.run.plan import render
from orchestrator.run.study import StudyRunner
from orchestrator.runtime.fake import FakeRuntime, FakeServer
from orchestrator.runtime.spec import ContainerSpec
from tests.fake_engine import engine, fake_runtime

MIB = 1 << 20


def study(starts: int) -> Config:
    typed = config.to_typed(config.compose(["protocol=smoke", f"study.starts={starts}"]))
    for arm in typed.arms.values():
        arm.image = "fake-engine"
        arm.build.context = None
    return typed


def with_memory(runtime: FakeRuntime, crash_on: frozenset[int] = frozenset()) -> list[str]:
    """The fake engine holding 100 MiB more at each start; the starts numbered in `crash_on` (over the run,
    from 0) exit at once. Returns what was started, in order."""
    started: list[str] = []
    serve = engine()

    def factory(spec: ContainerSpec) -> FakeServer:
        started.append(spec.name)
        if len(started) - 1 in crash_on:
            return FakeServer(handler=serve(spec).handler, log=["boom: no model"], exit_code=3)
        server = serve(spec)
        server.memory_bytes = 100 * MIB * len(started)
        return server

    runtime.images["fake-engine"] = factory
    return started


def run(typed: Config, runtime: FakeRuntime, tmp_path: Path) -> tuple[StudyRunner, RunPaths, list[str]]:
    paths, said = RunPaths(tmp_path / "run"), list[str]()
    runner = StudyRunner(typed, paths, "run-starts", runtime, say=said.append)
    runner.run()
    runner.cleanup()
    return runner, paths, said


def test_three_starts_give_three_arms_rows_and_one_answer_per_prompt_from_each_later_start(tmp_path: Path) -> None:
    typed, runtime = study(3), fake_runtime()
    started = with_memory(runtime)
    runner, paths, said = run(typed, runtime, tmp_path)
    assert runner.failed == []
    assert len(started) == 3 * len(typed.arms)  # a fresh engine each start
    rows = read_table(paths, "arms").to_pylist()
    for arm in typed.arms:
        mine = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["start"])
        assert [r["start"] for r in mine] == [0, 1, 2]
        assert all(r["status"] == "completed" and r["ready_ns"] >= r["start_ns"] for r in mine)
        assert all(r["peak_memory_bytes"] and r["peak_memory_bytes"] % (100 * MIB) == 0 for r in mine)
        assert all("memory: fake" in r["memory_note"] and "no GPUs" in r["memory_note"] for r in mine)
        assert mine[0]["fingerprint_json"] and mine[1]["fingerprint_json"] is None  # probed once
    assert any(line.endswith(" s") and "start 2/3 ready in" in line for line in said)
    responses = read_table(paths, "responses").to_pylist()
    prompts = list(typed.prompts.prompts)
    later = [r for r in responses if r["start"]]
    assert sorted((r["arm"], r["prompt_id"], r["start"]) for r in later) == sorted(
        (arm, p, s) for arm in typed.arms for p in prompts for s in (1, 2))
    assert all(r["role"] == "measured" and r["error"] is None for r in later)
    assert {r["request_id"] for r in later} == {f"{a}/{p}/start/{s}" for a in typed.arms for p in prompts
                                                 for s in (1, 2)}
    assert {r["start"] for r in responses if not r["request_id"].count("/start/")} == {0}
    # the cells are the first start's alone: the same as a run of one start
    _, one, _ = run(study(1), fake_runtime(), tmp_path / "one")
    assert [(c.arm, c.prompt_id, c.phase, c.n) for c in compare([paths], "baseline").cells] == \
        [(c.arm, c.prompt_id, c.phase, c.n) for c in compare([one], "baseline").cells]


def test_a_start_that_fails_is_recorded_fails_the_arm_and_the_next_start_still_runs(tmp_path: Path) -> None:
    typed, runtime = study(3), fake_runtime()
    typed.arms = {name: arm for name, arm in list(typed.arms.items())[:1]}
    typed.study.baseline = None
    for arm in typed.arms.values():
        arm.startup_timeout_s = 5
    with_memory(runtime, crash_on=frozenset({1}))
    runner, paths, said = run(typed, runtime, tmp_path)
    name = next(iter(typed.arms))
    assert runner.failed == [name]  # exit 4 (run/execute.py), said once however many starts fail
    rows = sorted(read_table(paths, "arms").to_pylist(), key=lambda r: r["start"])
    assert [(r["start"], r["status"]) for r in rows] == [(0, "completed"), (1, "failed"), (2, "completed")]
    assert "exited with status 3" in rows[1]["error"] and rows[1]["ready_ns"] is None
    assert any(f"[{name}] start 2/3 FAILED" in line for line in said)
    later = [r for r in read_table(paths, "responses").to_pylist() if r["start"]]
    assert {r["start"] for r in later} == {2}


def test_plan_says_how_many_times_each_arm_starts() -> None:
    assert "# study.starts=3: each arm is started 3 times" in render(study(3))
    assert "study.starts" not in render(study(1))


def test_resume_starts_again_only_the_later_start_that_did_not_complete(tmp_path: Path) -> None:
    """A run killed during baseline's second start (its arms row and answers never written): `run --resume`
    starts that one again, and neither the protocol nor any start that completed."""
    import pyarrow.parquet as pq

    from orchestrator.reproduce.resume import resume_plan

    paths, typed = RunPaths(tmp_path / "run"), study(3)
    runner = StudyRunner(typed, paths, "run-resume", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    for table, gone in (("arms", lambda r: r["start"] == 1), ("responses", lambda r: r["start"] == 1)):
        for part in paths.table(table).glob("baseline-*.parquet"):
            if any(gone(r) for r in pq.read_table(part).to_pylist()):
                part.unlink()
    plan = resume_plan(typed, paths)
    assert (plan.groups, plan.starts) == ({"baseline": set()}, {"baseline": [1]})
    resumed = StudyRunner(typed, paths, "run-resume-r1", fake_runtime(), say=lambda _: None, resume=plan)
    resumed.run()
    resumed.cleanup()
    arms = read_table(paths, "arms", ["arm", "start", "status", "attempt"]).to_pylist()
    assert sorted((r["arm"], r["start"], r["status"], r["attempt"]) for r in arms) == [
        ("baseline", 0, "completed", 0), ("baseline", 1, "completed", 1), ("baseline", 2, "completed", 0),
        ("wide_batch", 0, "completed", 0), ("wide_batch", 1, "completed", 0), ("wide_batch", 2, "completed", 0)]
    later = [r for r in read_table(paths, "responses", ["arm", "start", "attempt"]).to_pylist() if r["start"]]
    assert sorted((r["arm"], r["start"], r["attempt"]) for r in later if r["arm"] == "baseline") == \
        [("baseline", 1, 1)] * len(typed.prompts.prompts) + [("baseline", 2, 0)] * len(typed.prompts.prompts)
    assert resume_plan(typed, paths).groups == {}


def test_a_resume_interrupted_before_its_first_answer_is_resumed_past_its_attempt(tmp_path: Path) -> None:
    """`run --resume` stopped while its arm started leaves an arms row of attempt 1 (interrupted) and no answer
    of attempt 1: the next resume takes attempt 2, so its completed row is the latest and the run reads as
    completed (it took attempt 1 again: the two rows tied, and the run read 'interrupted' for good)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator.reproduce.resume import resume_plan

    paths, typed = RunPaths(tmp_path / "run"), study(1)
    runner = StudyRunner(typed, paths, "run-resume", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    for part in paths.table("responses").glob("baseline-*.parquet"):
        part.unlink()  # the first run was stopped before baseline answered
    first = sorted(paths.table("arms").glob("baseline-*.parquet"))[0]
    table = pq.read_table(first)
    row = {**table.to_pylist()[0], "status": "interrupted", "attempt": 1}  # the interrupted resume's row
    pq.write_table(pa.Table.from_pylist([row], schema=table.schema), first.with_name("baseline-00099.parquet"))
    plan = resume_plan(typed, paths)
    assert plan.attempt == 2 and plan.groups["baseline"]
    resumed = StudyRunner(typed, paths, "run-resume-r2", fake_runtime(), say=lambda _: None, resume=plan)
    resumed.run()
    resumed.cleanup()
    arms = read_table(paths, "arms", ["arm", "status", "attempt"]).to_pylist()
    assert sorted((r["arm"], r["status"], r["attempt"]) for r in arms) == [
        ("baseline", "completed", 2), ("wide_batch", "completed", 0)]
    assert resume_plan(typed, paths).groups == {}
