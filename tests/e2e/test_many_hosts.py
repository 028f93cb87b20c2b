"""An arm may name its own Docker host: the run uses it, the fingerprint records it, and the guard
treats a host difference as a variable. Here the 'remote' engine is this machine's engine reached by an
explicit URL, which exercises the same path as ssh://host."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]
HOST = "unix:///var/run/docker.sock"
SMALL = ["protocol=probe", "protocol.phases.sequential.repeats=2"]


def test_undeclared_host_difference_is_refused() -> None:
    result = orchestrator("run", f"arms.wide_batch.docker_host={HOST}", *SMALL)
    assert result.returncode == 2 and "docker_host" in result.stderr and "NOT declared" in result.stderr


def test_arm_on_its_own_engine(tmp_path: Path) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", f"arms.wide_batch.docker_host={HOST}",
                          "study.variables.wide_batch=[engine_args.max-num-seqs,docker_host]", *SMALL)
    assert result.returncode == 0, result.stderr[-2000:]
    arms = {a["arm"]: a for a in pq.read_table(tmp_path / "data" / "arms").to_pylist()}
    assert json.loads(arms["wide_batch"]["fingerprint_json"])["docker_host"] == HOST
    assert json.loads(arms["baseline"]["fingerprint_json"])["docker_host"] == "local"
    assert all(a["status"] == "completed" for a in arms.values())
