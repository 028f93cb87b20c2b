"""`run --resume` and the digests of flagged requests (protocol.request.digests, issue 45 item 1): they live in the
engine that answered, so a run stopped before or while they were fetched sends those requests again (with their
group) once resumed, and every flagged request of the protocol ends with its digests, whole, at its latest attempt."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from orchestrator import config
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.reproduce.resume import resume_plan
from orchestrator.run.study import StudyRunner
from orchestrator.runtime.fake import FakeRuntime, FakeServer
from orchestrator.runtime.spec import ContainerSpec
from tests import fake_engine
from tests.unit.test_digests_fetch import RECORDED, _hooked

OVERRIDES = ["protocol=smoke", "~arms.wide_batch", "~study.variables.wide_batch", "protocol.request.digests=true",
             "protocol.phases.sequential.repeats=2", "protocol.phases.concurrent.batches=1"]


def _stopping(at: int) -> Callable[[ContainerSpec], FakeServer]:
    """The hooked engine (a fake) that answers its `at`-th digests request with Ctrl-C, once in the study."""
    fetches = collections.Counter[str]()

    def server(spec: ContainerSpec) -> FakeServer:
        served = _hooked(failing=None)(spec)

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path.startswith("/v1/digests/"):
                fetches["n"] += 1
                if fetches["n"] == at:
                    raise KeyboardInterrupt
            return served.handler(request)
        return FakeServer(handler=handler, commands=fake_engine._commands, log=served.log)
    return server


def _run(paths: RunPaths, server: Callable[[ContainerSpec], FakeServer], resume: bool = False) -> None:
    typed = config.to_typed(config.compose(OVERRIDES))
    for arm in typed.arms.values():
        arm.engine, arm.image, arm.build.context = "transformers_hooked", "fake-hooked", None
    runner = StudyRunner(typed, paths, "run-digests", FakeRuntime({"fake-hooked": server},
                                                                  commands=fake_engine._commands),
                         say=lambda _: None, resume=resume_plan(typed, paths) if resume else None)
    try:
        runner.run()
    finally:
        runner.cleanup()


def _whole(paths: RunPaths) -> None:
    """Every flagged request that counts has its digests at its own attempt, each call once."""
    flagged = {(r["request_id"], r["attempt"]) for r in read_table(paths, "responses").to_pylist()
               if r["role"] == "measured"}
    calls = collections.Counter((r["request_id"], r["attempt"]) for r in read_table(paths, "digests").to_pylist())
    assert set(calls) == flagged and set(calls.values()) == {len(RECORDED["calls"])}


@pytest.mark.parametrize("at", [2, 5])  # in the sequential phase's fetch, and in the concurrent phase's
def test_ctrl_c_while_digests_are_fetched_then_resume_leaves_each_flagged_request_its_digests(tmp_path: Path,
                                                                                              at: int) -> None:
    paths = RunPaths(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        _run(paths, _stopping(at))
    assert read_table(paths, "digests").num_rows < 12 * len(RECORDED["calls"])  # some were not fetched
    _run(paths, _hooked(failing=None), resume=True)
    _whole(paths)
    assert resume_plan(config.to_typed(config.compose(OVERRIDES)), paths).groups == {}


def test_kill_9_before_the_digests_were_written_then_resume_fetches_them(tmp_path: Path) -> None:
    """What a kill -9 leaves: the answers flushed, the arm's row and the digests not (both are written last)."""
    paths = RunPaths(tmp_path / "run")
    _run(paths, _hooked(failing=None))
    for table in ("digests", "arms"):
        for part in paths.table(table).glob("*.parquet"):
            part.unlink()
    typed = config.to_typed(config.compose(OVERRIDES))
    assert len(resume_plan(typed, paths).groups["baseline"]) == 2 * 2 + 2  # 2 prompts: 2 sequential, 1 batch
    _run(paths, _hooked(failing=None), resume=True)
    _whole(paths)
