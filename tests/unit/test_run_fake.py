"""A whole study through the run stage on the fake runtime: arms started, readiness, fingerprint,
protocol, stop, the record and the comparison, with no container, process or network. Ground truth:
the fake engine is repeatable, its noisy variant is not, and the comparison must tell them apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import config
from orchestrator.analysis.compare import compare
from orchestrator.config.schema import Config
from orchestrator.guard.knobs import check_knobs
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import read_run
from orchestrator.record.tables import read_table
from orchestrator.run.study import StudyRunner
from orchestrator.runtime.fake import FakeServer
from orchestrator.runtime.spec import ContainerSpec
from tests.fake_engine import VERSION, engine, fake_runtime


def study(noisy_arm: str | None) -> Config:
    typed = config.to_typed(config.compose(["protocol=smoke"]))
    for name, arm in typed.arms.items():
        arm.image = "fake-noisy" if name == noisy_arm else "fake-engine"
        arm.build.context = None
    return typed


@pytest.mark.parametrize("noisy_arm", [None, "wide_batch"])
def test_the_run_records_every_request_and_the_comparison_finds_the_noise(tmp_path: Path,
                                                                          noisy_arm: str | None) -> None:
    typed, runtime = study(noisy_arm), fake_runtime()
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-fake", runtime, say=lambda _: None)
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert {a["status"] for a in arms.values()} == {"completed"}
    assert '"version": "' + VERSION in arms["baseline"]["fingerprint_json"]
    responses = read_table(paths, "responses").to_pylist()
    prompts = len(typed.prompts.prompts)
    # two arms: a cold request each, then 6 sequential + 2 batches of 4 per prompt
    assert len(responses) == 2 * (1 + prompts * (6 + 4 * 2))
    assert all(r["error"] is None for r in responses)
    cells = compare([paths], "baseline").cells
    varying = {c.arm for c in cells if c.distinct_signatures not in (None, 1)}
    assert varying == ({noisy_arm} if noisy_arm else set())
    logs = read_table(paths, "logs").to_pylist()
    assert any("shutting down" in line["text"] for line in logs)  # logs are read after the stop


def test_a_server_that_dies_at_start_fails_its_arm_and_leaves_nothing(tmp_path: Path) -> None:
    typed, runtime = study(None), fake_runtime()
    typed.arms["wide_batch"].image = "fake-crash"
    typed.arms["wide_batch"].startup_timeout_s = 5
    runner = StudyRunner(typed, RunPaths(tmp_path / "run"), "run-crash", runtime, say=lambda _: None)
    runner.run()
    runner.cleanup()
    assert runner.failed == ["wide_batch"]
    row = next(r for r in read_table(RunPaths(tmp_path / "run"), "arms").to_pylist() if r["arm"] == "wide_batch")
    assert "exited with status 3" in row["error"] and "boom: no model" in row["error"]
    assert runtime.cleanup({"org.orchestrator.run": "run-crash"}) == []


@pytest.mark.parametrize(("kind", "oom", "said"), [
    ("docker", True, "killed by signal 9 (SIGKILL), killed by the kernel: out of memory"),
    ("docker", False, "killed by signal 9 (SIGKILL); Docker does not report it OOMKilled"),
    ("process", False, "killed by signal 9 (SIGKILL); whether the kernel killed it for memory, a process's status "
                       "does not tell"),
])
def test_an_engine_a_signal_killed_says_which_and_whether_it_was_for_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, oom: bool, said: str) -> None:
    typed, runtime = study(None), fake_runtime()
    typed.runtime.kind = kind
    runtime.images["fake-killed"] = lambda spec: FakeServer(handler=lambda request: httpx.Response(500),
                                                            log=["loading"], exit_code=137)
    if oom:  # what Docker's State.OOMKilled makes docker.py say
        monkeypatch.setattr(runtime, "exit_reason", lambda handle: "killed by the kernel: out of memory (OOM) at "
                            "its memory limit of 60 MiB" if handle.name.endswith("wide_batch") else None)
    typed.arms["wide_batch"].image = "fake-killed"
    told: list[str] = []
    runner = StudyRunner(typed, RunPaths(tmp_path / "run"), "run-killed", runtime, say=told.append)
    runner.run()
    row = next(r for r in read_table(RunPaths(tmp_path / "run"), "arms").to_pylist() if r["arm"] == "wide_batch")
    assert row["error"].startswith(f"server exited with status 137 before it was ready; {said}"), row["error"]
    assert row["error"].count("out of memory") == oom  # said once, though the stop asks again
    assert any(line.startswith(f"[wide_batch] FAILED: server exited with status 137 before it was ready; {said}")
               for line in told)
    baseline = next(r for r in read_table(RunPaths(tmp_path / "run"), "arms").to_pylist() if r["arm"] == "baseline")
    assert baseline["error"] is None  # an engine the orchestrator stopped itself says nothing of signals


def test_the_knob_check_runs_through_the_runtime(tmp_path: Path) -> None:
    typed = study(None)
    typed.arms["wide_batch"].env["VLLM_BATCH_INVARIENT"] = "1"  # a typo the engine would ignore
    knobs = check_knobs(typed, fake_runtime(), "run-knobs")
    assert knobs["baseline"].checked and knobs["baseline"].unknown == []
    assert "Did you mean 'VLLM_BATCH_INVARIANT'?" in knobs["wide_batch"].unknown[0]


def test_an_engine_that_dies_mid_protocol_fails_its_arm_and_says_where_and_why(tmp_path: Path) -> None:
    from orchestrator.analysis.failures import arm_failures

    typed, runtime = study(None), fake_runtime()
    typed.arms["wide_batch"].image = "fake-dying"
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-dying", runtime, say=lambda _: None)
    runner.run()
    assert runner.failed == ["wide_batch"]
    rows = [r for r in read_table(paths, "responses").to_pylist() if r["arm"] == "wide_batch"]
    assert len(rows) == 1 + 2 * (6 + 4 * 2)  # every request of the protocol has its row, sent or not
    assert sum(r["error"] is None for r in rows) == 3
    assert sum((r["error"] or "").startswith("not sent") for r in rows) == len(rows) - 4
    kinds = [r["error_kind"] for r in rows if r["error"] is not None]  # recorded with each error, as data
    assert kinds.count("http") == 1 and kinds.count("cut") == len(rows) - 4 and None not in kinds
    [failure] = arm_failures(read_run(paths))
    assert failure.arm == "wide_batch" and failure.died_at is not None and failure.died_at.startswith("request 4 of 29")
    assert "HTTP 500" in failure.died_at and "the engine died at request 4 of 29" in (failure.error or "")
    assert failure.root_cause[0] == "ERROR EngineCore encountered a fatal error."
    assert failure.root_cause[-1] == "TypeError: 'function' object is not subscriptable"


def test_an_arm_whose_every_request_failed_is_never_a_success(tmp_path: Path) -> None:
    typed, runtime = study(None), fake_runtime()
    typed.arms["wide_batch"].image = "fake-refusing"  # healthy, but answers every completion with HTTP 400
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-refused", runtime, say=lambda _: None)
    runner.run()
    assert runner.failed == ["wide_batch"]
    row = next(r for r in read_table(paths, "arms").to_pylist() if r["arm"] == "wide_batch")
    assert row["status"] == "failed" and row["error"].startswith("no successful response: all 29 requests failed")


def test_the_root_cause_is_the_whole_error_block_after_the_last_answer_trimmed_in_the_middle() -> None:
    from orchestrator.analysis.failures import root_cause

    frames = [(f"2026-12-03T10:00:0{i % 10}.000000Z", f"(Worker pid=9) ERROR [x.py:1]   File 'f{i}.py'")
              for i in range(60)]
    lines = [("2026-12-03T09:58:00.000000000Z", "(APIServer pid=7) WARNING ulimit low: `OSError: [Errno 24]` ahead"),
             ("2026-12-03T09:59:00.000000000Z", "(EngineCore pid=8) ERROR an old error, before the last answer"),
             ("2026-12-03T10:00:00.000000Z", "(APIServer pid=7) INFO 200 OK"), *frames,
             ("2026-12-03T10:00:09.000000Z", "(Worker pid=9) ERROR [x.py:1] TypeError: 'function' object is not "
                                             "subscriptable"),
             ("2026-12-03T10:00:09.500000Z", "(APIServer pid=7) INFO Finished server process")]
    after = 1796292000 * 10**9  # 2026-12-03T10:00:00Z
    block = root_cause(lines, after)
    assert block[0].endswith("File 'f0.py'") and block[-1].endswith("is not subscriptable")
    assert len(block) == 39 and block[8] == "... (23 lines) ..."
    assert root_cause(lines, None)[0].endswith("an old error, before the last answer")  # never answered: from the start



def _observed(traced: bool, metrics_calls: list[httpx.Request]) -> Any:
    """The fake engine, its /metrics calls counted, its answers with or without `engine_trace`."""
    base = engine()

    def factory(spec: ContainerSpec) -> FakeServer:
        server = base(spec)
        answer = server.handler

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/metrics":
                metrics_calls.append(request)
            response = answer(request)
            if traced or request.url.path != "/v1/completions":
                return response
            return httpx.Response(200, json={k: v for k, v in response.json().items() if k != "engine_trace"})

        server.handler = handler
        return server
    return factory


@pytest.mark.parametrize("traced", [True, False])
def test_metrics_are_sampled_only_for_an_engine_that_does_not_trace(tmp_path: Path, traced: bool) -> None:
    """The trace is exact, and sampling /metrics every few ms loads the engine it observes: once answers carry
    `engine_trace` no batch samples; an engine without one (vLLM) is sampled in every batch."""
    typed, runtime = study(None), fake_runtime()
    metrics_calls: list[httpx.Request] = []
    runtime.images["fake-engine"] = _observed(traced, metrics_calls)
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-trace", runtime, say=lambda _: None)
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    batches = [r for r in read_table(paths, "responses").to_pylist() if r["phase_kind"] == "concurrent"]
    assert len(batches) == 2 * len(typed.prompts.prompts) * 2 * 4
    if traced:
        assert metrics_calls == [] and {r["batch_running_max"] for r in batches} == {None}
        assert {r["batch_server_together"] for r in batches} == {4}
    else:
        assert {r["batch_server_together"] for r in batches} == {None}
        assert None not in {r["batch_running_max"] for r in batches}  # every batch sampled at least once


def test_the_root_cause_in_one_line_is_the_last_exception_raised() -> None:
    from orchestrator.analysis.failures import cause_line

    block = ["ERROR 05-01 [core.py:1] EngineCore failed to start.", "Traceback (most recent call last):",
             '  File "x.py", line 3, in <module>',
             "(EngineCore pid=12) NotImplementedError: No Unquantized MoE backend supports the deployment "
             "configuration", "RuntimeError: Engine core initialization failed. See root cause above.",
             "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
             "    except EngineDeadError as exc:", "ERROR 05-01 [launcher.py:9] shutting down"]
    assert cause_line(block) == ("NotImplementedError: No Unquantized MoE backend supports the deployment "
                                 "configuration")
    assert cause_line(["ERROR something broke"]) == "ERROR something broke"
    assert cause_line([]) is None
