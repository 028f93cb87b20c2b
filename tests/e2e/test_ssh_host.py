"""An arm on another Docker host reached over SSH (`docker_host: ssh://...`): the second host that
scripts/ci-hosts.sh runs behind a real sshd, with its own images, containers and bridge. The image is
shipped there from the study's engine and pinned by id; the arm's port stays on the far host's 127.0.0.1
and is reached through an ssh tunnel; logs, exec (the environment probe) and cleanup work; and when the
link drops, nothing of the run is left running there."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, orchestrator
from tests.hosts import Hosts, hosts_fixture, nothing_left_remote_fixture  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.docker, pytest.mark.hosts,
              pytest.mark.usefixtures("no_leftover_containers", "nothing_left_remote")]
IMAGE = "orchestrator/reference-engine:0.1.0"
SMALL = ["protocol=probe", "protocol.phases.sequential.repeats=2"]


def on_remote(where: Hosts, arm: str) -> list[str]:
    return [f"arms.{arm}.docker_host={where.ssh_url}",
            "study.variables.wide_batch=[engine_args.max-num-seqs,docker_host]"]


def test_arm_on_a_remote_engine_gets_the_shipped_image(hosts: Hosts, tmp_path: Path) -> None:
    local_id = docker.from_env().images.get(IMAGE).id
    remote = hosts.remote()
    with contextlib.suppress(docker.errors.ImageNotFound):  # the second engine is this test's own: make it
        remote.images.remove(local_id, force=True)  # lack the image, so that it is shipped
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *on_remote(hosts, "wide_batch"), *SMALL,
                          env=hosts.env())
    assert result.returncode == 0, result.stderr[-3000:]
    arms = {a["arm"]: a for a in pq.read_table(tmp_path / "data" / "arms").to_pylist()}
    far, near = (json.loads(arms[name]["fingerprint_json"]) for name in ("wide_batch", "baseline"))
    assert far["docker_host"] == hosts.ssh_url and near["docker_host"] == "local"
    assert far["ran_on"]["docker_host"] == hosts.ssh_url and far["ran_on"]["engine_host"]
    assert far["image_source"]["how"] == "shipped" and far["image_source"]["from"] == "local"
    assert far["image_source"]["bytes"] > 0
    assert near["image_source"] == {"host": "local", "how": "present"}
    assert arms["wide_batch"]["image_id"] == arms["baseline"]["image_id"] == local_id  # pinned by id
    assert remote.images.get(IMAGE).id == local_id  # shipped, tagged there
    assert "error" not in far["probe"] and far["probe"]["env"]  # the environment probe ran over exec
    logs = pq.read_table(tmp_path / "data" / "logs").to_pylist()
    assert any(line["arm"] == "wide_batch" for line in logs)  # the far container's log, read over the link
    assert all(a["status"] == "completed" for a in arms.values())


@pytest.mark.parametrize("drop", ["sshd_sessions_end", "orchestrator_killed"])
def test_dropped_link_leaves_nothing_running_on_the_remote_engine(hosts: Hosts, tmp_path: Path, drop: str) -> None:
    remote = hosts.remote()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp_path}", *on_remote(hosts, "baseline"),
         "protocol=probe", "protocol.phases.sequential.repeats=100000"],
        cwd=ROOT, env=hosts.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        assert proc.stderr is not None
        for line in proc.stderr:  # until the far arm is ready: its container runs, its tunnel is open
            lines.append(line)
            if "ready at" in line and "[baseline]" in line:
                break
        [container] = remote.containers.list(filters={"label": "org.orchestrator.arm=baseline"})
        [binding] = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"]
        assert binding["HostIp"] == "127.0.0.1"  # the port stays on the far host's loopback...
        ready = next(line for line in lines if "ready at" in line)
        assert f":{binding['HostPort']}" not in ready  # ...and is reached through the tunnel
        if drop == "sshd_sessions_end":  # the link drops: every sshd session serving this run ends
            sshd = Path(hosts.sshd_pid_file).read_text().strip()
            sessions = subprocess.run(["ps", "--ppid", sshd, "-o", "pid="], capture_output=True,
                                      text=True).stdout.split()
            assert sessions
            for pid in sessions:
                os.kill(int(pid), signal.SIGTERM)
            stderr = "".join(lines) + proc.communicate(timeout=300)[1]
            assert proc.returncode == 4, stderr[-3000:]  # the measurement failed; not a bug, not a hang
            assert "cannot be reached" in stderr
        else:  # the orchestrator dies without a word: its ssh processes see their input close
            ssh = subprocess.run(["pgrep", "-P", str(proc.pid), "-x", "ssh"], capture_output=True, text=True)
            children = ssh.stdout.split()
            assert len(children) == 2  # the arm's tunnel and the run's watchdog
            proc.kill()
            proc.wait()
            for _ in range(120):
                if not any(Path(f"/proc/{pid}").exists() for pid in children):
                    break
                time.sleep(0.5)
            assert not any(Path(f"/proc/{pid}").exists() for pid in children)  # nothing of ours left here
    finally:
        if proc.poll() is None:
            proc.kill()
    for _ in range(120):  # the far side's watchdog removes the run's containers
        if not remote.containers.list(all=True, filters={"label": "org.orchestrator.arm=baseline"}):
            break
        time.sleep(0.5)
    assert not remote.containers.list(all=True, filters={"label": "org.orchestrator.arm=baseline"})
