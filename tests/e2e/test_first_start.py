"""The reaper is started before a run's first container (run/execute.py), so a kill -9 or a Ctrl-C the moment
the daemon has created that container still leaves nothing. Real Docker, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import LABEL, ROOT, interrupt

OWNER_PID = "org.orchestrator.owner.pid"


def _start_and_catch_first_create(docker_client, run_dir: Path  # type: ignore[no-untyped-def]
                                  ) -> subprocess.Popen[str]:
    """Start `orchestrator run` and return as soon as the daemon has created its first container."""
    since = int(time.time()) - 1
    events = docker_client.events(since=since, decode=True,
                                  filters={"type": "container", "event": "create", "label": LABEL})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    timer = threading.Timer(120, events.close)  # the event stream blocks: end it if nothing comes
    timer.start()
    try:
        for event in events:
            if event.get("Actor", {}).get("Attributes", {}).get(OWNER_PID) == str(proc.pid):
                return proc
        raise AssertionError("no container was created")
    finally:
        timer.cancel()
        events.close()


def _owned(docker_client, pid: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.name for c in docker_client.containers.list(all=True, filters={"label": f"{OWNER_PID}={pid}"})]


def _gone_within(docker_client, pid: int, timeout_s: float) -> list[str]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while (left := _owned(docker_client, pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.docker
def test_kill_9_the_moment_the_first_container_is_created_leaves_nothing(tmp_path: Path,
                                                                          docker_client) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    proc = _start_and_catch_first_create(docker_client, run_dir)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _gone_within(docker_client, proc.pid, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "removed" in (run_dir / "reaper.log").read_text()


@pytest.mark.docker
def test_ctrl_c_the_moment_the_first_container_is_created_leaves_nothing(tmp_path: Path,
                                                                          docker_client) -> None:  # type: ignore[no-untyped-def]
    proc = _start_and_catch_first_create(docker_client, tmp_path / "run")
    stderr = interrupt(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert _gone_within(docker_client, proc.pid, 10) == []
