"""study.starts against the reference engine, in Docker and as a process: every start is a fresh engine with
its own arms row (ready times, sampled memory peaks), the later starts' answers are recorded and kept out of the
cells, and the study exits 0."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

SMALL = ["study.starts=3", "~arms.wide_batch", "protocol.phases.sequential.repeats=2",
         "protocol.phases.concurrent.repeats=2", "protocol.phases.concurrent.batches=1",
         "protocol.request.max_tokens=4"]


@pytest.mark.parametrize("runtime", ["docker", "process"])
def test_three_starts_each_record_ready_times_memory_and_answers(tmp_path: Path, runtime: str) -> None:
    extra = ["runtime=process", "arm@arms.baseline=reference_process"] if runtime == "process" else []
    env = {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")}
    result = orchestrator("run", f"hydra.run.dir={tmp_path / 'run'}", *SMALL, *extra, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[baseline] start 3/3 ready in" in result.stderr
    arms = sorted(pq.read_table(tmp_path / "run" / "data" / "arms").to_pylist(), key=lambda r: r["start"])
    assert [(a["arm"], a["start"], a["status"]) for a in arms] == [("baseline", s, "completed") for s in range(3)]
    assert len({a["container_id"] for a in arms}) == 3  # a fresh engine each start
    for arm in arms:
        assert arm["ready_ns"] > arm["start_ns"] and arm["stop_ns"] >= arm["ready_ns"]
        assert arm["peak_memory_bytes"] > 10 << 20, arm["memory_note"]  # a Python server with torch: far more
        assert arm["peak_gpu_memory_bytes"] is None and "no GPUs" in arm["memory_note"]
    responses = pq.read_table(tmp_path / "run" / "data" / "responses").to_pylist()
    later = [r for r in responses if r["start"]]
    prompts = {r["prompt_id"] for r in responses if not r["start"]}
    assert sorted((r["start"], r["prompt_id"]) for r in later) == sorted((s, p) for s in (1, 2) for p in prompts)
    assert all(r["error"] is None and r["role"] == "measured" for r in later)
