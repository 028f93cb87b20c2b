"""The parts beyond one machine that scripts/ci-hosts.sh starts here (a single-node SLURM cluster, an sshd,
a second Docker host behind it), found through the hosts.json it writes. Missing: skipped locally,
failed under CI=true (`make test` starts them)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import labelled


@dataclass(frozen=True)
class Hosts:
    slurm_conf: str
    ssh_url: str  # ssh://ALIAS:PORT: the second engine, reached through the sshd
    ssh_home: str  # HOME whose .ssh/config, key and known_hosts reach it (the user's own ~/.ssh untouched)
    remote_docker: str  # the second engine's socket, to look at it directly
    sshd_pid_file: str

    def env(self, **more: str) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.slurm_conf, "HOME": self.ssh_home, **more}

    def remote(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.remote_docker)


def _missing(message: str) -> None:
    message += "; `bash scripts/ci-hosts.sh start` (root, Debian) starts them"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires SLURM, sshd and the second Docker host: {message}")
    pytest.skip(message)


@pytest.fixture(scope="session", name="hosts")
def hosts_fixture() -> Hosts:
    cache = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator")
    found = cache / "hosts" / "hosts.json"
    if not found.is_file():
        _missing(f"no {found}")
    values = json.loads(found.read_text())
    hosts = Hosts(**{key: values[key] for key in Hosts.__dataclass_fields__})
    checks = {"SLURM": ["scontrol", "ping"], "the ssh:// engine": ["ssh", "-F", f"{hosts.ssh_home}/.ssh/config",
                                                                 "orch-ci-remote", "docker", "version"]}
    for what, argv in checks.items():
        try:
            ok = subprocess.run(argv, env=hosts.env(), capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            _missing(f"{what} is not reachable ({' '.join(argv)})")
    return hosts


@pytest.fixture(name="nothing_left_remote")
def nothing_left_remote_fixture(hosts: Hosts) -> Iterator[None]:
    """Like no_leftover_containers, on the second engine: no container of a run is left there."""
    client = hosts.remote()
    before = {c.id for c in labelled(client)}
    yield
    left = [c for c in labelled(client) if c.id not in before]
    for container in left:
        container.remove(force=True)
    assert not left, f"containers left on the remote Docker host: {[c.name for c in left]}"
