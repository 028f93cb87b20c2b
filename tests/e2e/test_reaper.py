"""Nothing left behind when the orchestrator is killed with SIGKILL (no handler runs): the reaper sidecar
removes the run's containers and processes; `orchestrator clean` removes a dead run's leftovers and never a
live run's. Real Docker, real processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, orchestrator

LABEL = "org.orchestrator.run"
LONG = ["~arms.wide_batch", "protocol.phases.sequential.repeats=2000", "protocol.request.max_tokens=16"]
PROCESS = ["runtime=process", "arm@arms.baseline=reference_process"]


def _start(run_dir: Path, *overrides: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={run_dir}", *overrides],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def _owned_by(docker_client, pid: int) -> list:  # type: ignore[no-untyped-def,type-arg]
    """The containers a run's orchestrator (its PID) started; one removed while listing is gone, not an error."""
    import docker

    try:
        return list(docker_client.containers.list(all=True, filters={"label": f"org.orchestrator.owner.pid={pid}"}))
    except docker.errors.NotFound:
        return _owned_by(docker_client, pid)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a PID 1 that does not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return bool(predicate())


@pytest.mark.docker
def test_kill_9_mid_run_leaves_no_container(tmp_path: Path, docker_client) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    proc = _start(run_dir, *LONG)
    try:
        ours = lambda: _owned_by(docker_client, proc.pid)  # noqa: E731
        assert _wait_for(lambda: bool(ours()), 120), "the arm never started"
        time.sleep(2)  # mid-protocol
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait_for(lambda: not ours(), 10), f"left behind: {[c.name for c in ours()]}"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "removed" in (run_dir / "reaper.log").read_text()


def test_kill_9_mid_run_leaves_no_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)}
    proc = _start(tmp_path / "run", *PROCESS, *LONG, env=env)
    records = lambda: [json.loads(p.read_text()) for p in state.glob("*/process.json")]  # noqa: E731
    try:
        assert _wait_for(lambda: bool(records()), 120), "the arm never started"
        pids = [r["pid"] for r in records()]
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGKILL)  # the server runs in a session of its own: it survives this
        proc.wait()
        assert _wait_for(lambda: not records(), 10), records()
        assert not [pid for pid in pids if _running(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.docker
def test_clean_removes_a_dead_run_s_container_and_keeps_a_live_one(tmp_path: Path,
                                                                    docker_client) -> None:  # type: ignore[no-untyped-def]
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {LABEL: "clean-test-dead", "org.orchestrator.arm": "a", "org.orchestrator.owner.host": os.uname().nodename,
              "org.orchestrator.owner.pid": str(dead.pid)}
    leftover = docker_client.containers.run("orchestrator/debian-python:bookworm", ["sleep", "600"], detach=True,
                                            labels=labels, network_mode="none")
    run_dir = tmp_path / "run"
    proc = _start(run_dir, *LONG)
    try:
        live = lambda: [c for c in docker_client.containers.list(filters={"label": LABEL})  # noqa: E731
                        if c.labels.get("org.orchestrator.owner.pid") == str(proc.pid)]
        assert _wait_for(lambda: bool(live()), 120), "the arm never started"
        result = orchestrator("clean")
        assert result.returncode == 0, result.stderr
        # other dead runs' leftovers on a reused machine may be removed too; the one made here must be
        removed = result.stdout.splitlines()[0].partition(": ")[2].split(", ")
        assert result.stdout.startswith("removed ") and leftover.name in removed, result.stdout
        assert "kept" in result.stdout and "is alive" in result.stdout
        assert live(), "a live run's container was removed"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        with contextlib.suppress(Exception):
            leftover.remove(force=True)


def test_resume_after_kill_9_completes_the_run_with_one_row_per_request(tmp_path: Path) -> None:
    """kill -9 mid-run (what was not flushed is lost), then `run --resume`: every request of the protocol has
    exactly one latest row, the kept rows are attempt 0, the re-sent ones attempt 1, each restarted arm a new
    cold request."""
    import collections

    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import read_table

    state, run_dir = tmp_path / "state", tmp_path / "run"
    env = {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)}
    study = ["runtime=process", "arm@arms.baseline=reference_process", "arm@arms.wide_batch=reference_process",
             "protocol.phases.sequential.repeats=40", "protocol.request.max_tokens=8"]
    proc = _start(run_dir, *study, env=env)
    assert _wait_for(lambda: any((run_dir / "data" / "responses").glob("*.parquet")), 120), "nothing recorded"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _wait_for(lambda: not list(state.glob("*/process.json")), 10)
    before = orchestrator("compare", str(run_dir), env=env)
    assert before.returncode == 4 and "INCOMPLETE: arm " in (run_dir / "report.md").read_text()
    result = orchestrator("run", "--resume", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming" in result.stderr and "attempt 1" in result.stderr
    latest = read_table(RunPaths(run_dir), "responses", ["arm", "request_id", "attempt", "role", "error"]).to_pylist()
    per_arm = 1 + 2 * (40 + 4 * 2)  # cold, then 2 prompts x (40 sequential + 2 batches of 4)
    ids = collections.Counter(r["request_id"] for r in latest if not r["request_id"].endswith("/-1"))
    assert len(ids) == 2 * per_arm and set(ids.values()) == {1}, "a request without exactly one latest row"
    assert all(r["error"] is None for r in latest)
    assert {r["attempt"] for r in latest} == {0, 1}
    restarts = [r for r in latest if r["request_id"].endswith("/-1")]
    assert restarts and all(r["role"] == "cold" and r["attempt"] == 1 for r in restarts)
    arms = read_table(RunPaths(run_dir), "arms", ["arm", "status", "attempt"]).to_pylist()
    assert sorted((a["arm"], a["status"]) for a in arms) == [("baseline", "completed"), ("wide_batch", "completed")]
    assert "INCOMPLETE" not in (run_dir / "report.md").read_text()
    again = orchestrator("run", "--resume", str(run_dir), env=env)
    assert again.returncode == 0 and "nothing to resume" in again.stderr
