"""Sweeps on a real SLURM cluster (the single-node one scripts/ci-hosts.sh starts) through Hydra's submitit
launcher: each job a SLURM job, every run dir in the sweep dir, the report comparing them; a job that
SLURM cancels or kills at its time limit is reported with SLURM's state and reason, its containers are
cleaned up, the other jobs still count, and the sweep exits with the worst status."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT, orchestrator
from tests.hosts import Hosts, hosts_fixture  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.docker, pytest.mark.hosts, pytest.mark.usefixtures("no_leftover_containers")]
SMALL = ["study=sweep", "protocol.phases.sequential.repeats=2", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=1"]


def test_two_job_sweep_runs_as_slurm_jobs(hosts: Hosts, tmp_path: Path) -> None:
    result = orchestrator("run", "-m", *SMALL, "hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10",
                          "arms.arm.engine_args.max-num-seqs=8,16", f"hydra.sweep.dir={tmp_path}", env=hosts.env())
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert sorted(summary["jobs"]) == ["0", "1"] and summary["failed_jobs"] == {}
    [pair] = summary["single_variable_pairs"]
    assert pair["key"] == "arms.arm.engine_args.max-num-seqs"
    report = json.loads((tmp_path / "report.json").read_text())
    assert {p["verdict"] for p in report["pairs"]} == {"identical"}
    for job in ("0", "1"):
        assert (tmp_path / job / "data" / "responses").is_dir()
        job_id = yaml.safe_load((tmp_path / job / ".hydra" / "hydra.yaml").read_text())["hydra"]["job"]["id"]
        array_id, _, task = str(job_id).partition("_")
        assert task == job and (tmp_path / ".submitit" / str(job_id)).is_dir()  # it was SLURM's job
        shown = subprocess.run(["scontrol", "show", "job", "-o", array_id], env=hosts.env(), capture_output=True,
                               text=True, check=True).stdout
        assert f"ArrayTaskId={job} " in shown and "JobState=COMPLETED" in shown.split(f"ArrayTaskId={job} ")[1]
        [arm] = pq.read_table(tmp_path / job / "data" / "arms").to_pylist()
        assert json.loads(arm["fingerprint_json"])["ran_on"]["slurm_job"] == job_id  # the record says where


def test_cancelled_and_timed_out_jobs_are_reported_with_slurms_reason(hosts: Hosts, tmp_path: Path) -> None:
    # job 0 finishes; job 1 outlives its 1-minute limit; job 2 is cancelled (scancel) while it runs
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-m", *SMALL, "hydra/launcher=slurm",
         "hydra.launcher.timeout_min=1", "protocol.phases.sequential.repeats=2,100000,100001",
         f"hydra.sweep.dir={tmp_path}"], cwd=ROOT, env=hosts.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        for _ in range(600):
            started = list((tmp_path / ".submitit").glob("*_2"))
            if (started and (tmp_path / "2" / "run.json").is_file()) or proc.poll() is not None:
                break
            time.sleep(0.5)
        assert started, "job 2 was never submitted"
        subprocess.run(["scancel", started[0].name], env=hosts.env(), check=True)
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]  # cancelled (130) is the worst of 0, 4 and 130
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert sorted(summary["jobs"]) == ["0"]  # the finished job is still compared
    failed = summary["failed_jobs"]
    assert "TIMEOUT (TimeLimit)" in failed["1"] and "CANCELLED" in failed["2"]
    assert "sweep job 1" in stderr and "TIMEOUT" in stderr and "sweep job 2" in stderr
