"""The fault suite: real servers that fail in every way an engine fails (tests/faults/server.py, as local
processes and in containers), and an orchestrator interrupted, killed, or out of disk. For each: the outcome,
the exit status, and the row count (every request sent has exactly one row, success or error), and nothing
left behind. Traffic goes to 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import LABEL, ROOT, orchestrator

# One arm, one prompt: 2 sequential requests and a batch of 3 (5 requests), a short request timeout.
SMALL = ["~arms.wide_batch", "~prompts.prompts.count", "protocol.phases.sequential.repeats=2",
         "protocol.phases.concurrent.repeats=3", "protocol.phases.concurrent.batches=1", "protocol.request_timeout_s=3"]
PER_PROMPT = 5  # 2 sequential + a batch of 3
REQUESTS = 1 + PER_PROMPT  # one arm, one prompt: the cold request first
FAULTY = ["runtime=process", "arm@arms.baseline=reference_process", "arms.baseline.build.context=tests/faults",
          "arms.baseline.knobs.entrypoint=null", "arms.baseline.knobs.command=null", "arms.baseline.metrics_path=''",
          *SMALL]


def faulty(mode: str, after: int = 0, pad_kb: int = 0) -> list[str]:
    """The faulty server as the arm (the reference arm's engine flags follow; it ignores them)."""
    return [*FAULTY, f"arms.baseline.command=[python3,tests/faults/server.py,--mode,{mode},--after,{after},"
                     f"--pad-kb,{pad_kb}]"]


def rows(run_dir: Path) -> list[dict[str, object]]:
    return pq.read_table(run_dir / "data" / "responses").to_pylist()


@pytest.mark.parametrize(("mode", "error", "kinds"), [
    ("500", "HTTP 500", {"http"}), ("garbage", "not JSON", {"answer"}), ("truncated", "JSON", {"answer"}),
    ("hang", "", {"timeout"}), ("close", "", {"protocol", "read"}),
])
def test_a_server_that_never_answers_well_fails_its_arm_with_a_row_per_request(tmp_path: Path, mode: str,
                                                                              error: str, kinds: set[str]) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *faulty(mode),
                          env={**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")})
    assert result.returncode == 4, result.stderr[-2000:]
    assert "no successful response" in result.stderr
    recorded = rows(tmp_path)
    assert len(recorded) == REQUESTS and all(r["error"] for r in recorded), recorded
    assert all(error.lower() in str(r["error"]).lower() for r in recorded), [r["error"] for r in recorded]
    assert {r["error_kind"] for r in recorded} <= kinds, [(r["error_kind"], r["error"]) for r in recorded]
    assert not list((tmp_path / "state").glob("*/process.json"))  # nothing left running


def test_an_engine_that_dies_mid_run_is_named_and_the_rest_are_not_sent_rows(tmp_path: Path) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *faulty("die", after=1),
                          env={**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")})
    assert result.returncode == 4, result.stderr[-2000:]
    recorded = rows(tmp_path)
    assert len(recorded) == REQUESTS
    assert sum(r["error"] is None for r in recorded) == 1
    report = (tmp_path / "report.md").read_text()
    assert "engine core died: fault injected" in report  # the root cause, from the engine's log


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftover_containers")
def test_a_container_oom_killed_under_its_memory_limit_fails_its_arm(tmp_path: Path) -> None:
    result = orchestrator(
        "run", f"hydra.run.dir={tmp_path}", *SMALL, "arms.baseline.image=orchestrator/debian-python:bookworm",
        "arms.baseline.build.context=null", "arms.baseline.memory=64m",
        "arms.baseline.command=[python3,/faults/server.py,--host,0.0.0.0,--mode,oom,--hold-mb,512]",
        f"arms.baseline.volumes=[{{host: {ROOT / 'tests' / 'faults'}, container: /faults}}]",
        "arms.baseline.knobs.command=null", "arms.baseline.metrics_path=''")
    assert result.returncode == 4, result.stderr[-2000:]
    arms = pq.read_table(tmp_path / "data" / "arms").to_pylist()
    assert arms[0]["status"] == "failed" and arms[0]["exit_code"] == 137
    assert "out of memory" in (arms[0]["error"] or "") or "OOM" in (arms[0]["error"] or ""), arms[0]["error"]
    said = "killed by signal 9 (SIGKILL), killed by the kernel: out of memory (OOM) at its memory limit of 64 MiB"
    assert said in arms[0]["error"] and said in result.stderr  # which signal, and Docker's OOMKilled
    assert len(rows(tmp_path)) == REQUESTS


@pytest.mark.docker
@pytest.mark.usefixtures("no_leftover_containers")
def test_a_container_killed_mid_run_fails_its_arm_and_every_request_has_a_row(tmp_path: Path,
                                                                             docker_client) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp_path}",
                             "~arms.wide_batch", "protocol.phases.sequential.repeats=400"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def serving() -> bool:  # the arm's container is up and its engine answers: mid-run from here
        return any(c.labels.get("org.orchestrator.owner.pid") == str(proc.pid)
                   and b"Starting vLLM-compatible server" in c.logs()
                   for c in docker_client.containers.list(filters={"label": LABEL}))

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not serving():
        time.sleep(0.2)
    time.sleep(2)
    for container in docker_client.containers.list(filters={"label": LABEL}):
        if container.labels.get("org.orchestrator.owner.pid") == str(proc.pid):
            container.kill()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4, stderr[-2000:]
    assert "killed by signal 9 (SIGKILL); Docker does not report it OOMKilled" in stderr  # not its memory limit
    recorded = rows(tmp_path)
    assert len(recorded) == 1 + 2 * (400 + 4 * 2)  # every request of the protocol: answered, failed or not sent
    assert any(r["error"] is None for r in recorded) and any(r["error"] for r in recorded)


def test_ctrl_c_twice_still_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp_path / 'run'}",
                             *faulty("ok"), "protocol.phases.sequential.repeats=2000"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(state.glob("*/process.json")):
        time.sleep(0.1)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # impatient: during the clean-up
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and list(state.glob("*/process.json")):
        time.sleep(0.2)
    assert not list(state.glob("*/process.json"))


def test_two_studies_at_once_do_not_clash(tmp_path: Path) -> None:
    env = {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")}
    procs = [subprocess.Popen([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp_path / name}",
                               "runtime=process", "arm@arms.baseline=reference_process",
                               "arm@arms.wide_batch=reference_process", *SMALL[2:]], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [r[1][-1500:] for r in results]
    ids = {json.loads((tmp_path / name / "run.json").read_text())["run_id"] for name in ("a", "b")}
    assert len(ids) == 2
    for name in ("a", "b"):
        assert len(rows(tmp_path / name)) == 2 * (1 + 2 * PER_PROMPT)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_a_full_disk_while_the_record_is_written_fails_cleanly(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        state = tmp_path / "state"
        # Few requests, so the disk check before the start passes (its estimate knows no padding), each padded
        # with 256 KB of random text, so the record outgrows the 1 MiB tmpfs while it is written.
        result = orchestrator("run", f"hydra.run.dir={disk / 'run'}", *faulty("ok", pad_kb=256),
                              "protocol.phases.sequential.repeats=16",
                              env={**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)})
        assert result.returncode == 4, result.stderr[-2000:]
        assert "No space left on device" in result.stderr and "Traceback" not in result.stderr
        assert not list(state.glob("*/process.json"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)
