"""A 2x2 Hydra multirun on the reference engine: one arm per job, and a sweep report that finds the four
single-variable pairs by itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.report.sweep import single_variable_pairs
from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def test_single_variable_pairs_logic() -> None:
    jobs = {"0": {"a": "1", "b": "x"}, "1": {"a": "1", "b": "y"}, "2": {"a": "2", "b": "x"}, "3": {"a": "2", "b": "y"}}
    assert single_variable_pairs(jobs) == [("0", "1", "b"), ("0", "2", "a"), ("1", "3", "a"), ("2", "3", "b")]


def test_two_by_two_sweep_finds_four_pairs(tmp_path: Path) -> None:
    result = orchestrator("run", "-m", "study=sweep", "+arms.arm.engine_args.fused-finalize=true,false",
                          "arms.arm.engine_args.max-num-seqs=8,16", "protocol.phases.sequential.repeats=6",
                          f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert len(summary["jobs"]) == 4
    assert summary["swept_keys"] == ["arms.arm.engine_args.fused-finalize", "arms.arm.engine_args.max-num-seqs"]
    pairs = {(p["a"], p["b"]): p["key"] for p in summary["single_variable_pairs"]}
    assert len(pairs) == 4
    report = json.loads((tmp_path / "report.json").read_text())
    verdicts = {(p["arm_a"], p["arm_b"]): p["verdict"] for p in report["pairs"]}
    fused = {job for job, j in summary["jobs"].items()
             if j["overrides"]["arms.arm.engine_args.fused-finalize"].lower() == "true"}
    for (a, b), key in pairs.items():
        fused_jobs = {a.split("/")[0], b.split("/")[0]} & fused
        # Only max-num-seqs differs between the two unfused jobs: they must agree; a fused job against an
        # unfused one differs (6 signatures in 6 against one: p = 2 / 924); two fused jobs show all-distinct
        # signatures on both sides, which no test can tell apart.
        expected = {0: "identical", 1: "differ", 2: "no difference shown"}[len(fused_jobs)]
        assert verdicts[(a, b)] == expected, (a, b, key)
    assert "Single-variable pairs: 4" in (tmp_path / "report.md").read_text()
    assert "Swept keys" in (tmp_path / "report.html").read_text()
    (tmp_path / "report.md").unlink()  # `compare SWEEP_DIR` makes the sweep's report again from its jobs
    again = orchestrator("compare", str(tmp_path))
    assert again.returncode == 0 and "(4 single-variable pairs over arms.arm.engine_args" in again.stdout
    assert "Single-variable pairs: 4" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["pairs"] == report["pairs"]


def test_joblib_runs_the_sweep_with_two_workers(tmp_path: Path) -> None:
    result = orchestrator("run", "-m", "study=sweep", "+arms.arm.engine_args.fused-finalize=true,false",
                          "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "protocol.phases.sequential.repeats=2",
                          f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert len(summary["jobs"]) == 2 and len(summary["single_variable_pairs"]) == 1
    assert (tmp_path / "0" / "data" / "responses").is_dir() and (tmp_path / "1" / "data" / "responses").is_dir()


def test_submitit_local_executor_runs_a_two_job_sweep(tmp_path: Path) -> None:
    result = orchestrator("run", "-m", "study=sweep", "arms.arm.engine_args.max-num-seqs=8,16",
                          "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
                          "protocol.phases.sequential.repeats=2", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep.json").read_text())
    [pair] = summary["single_variable_pairs"]
    assert pair["key"] == "arms.arm.engine_args.max-num-seqs"
    report = json.loads((tmp_path / "report.json").read_text())
    assert {p["verdict"] for p in report["pairs"]} == {"identical"}


def test_parallel_jobs_sharing_gpus_are_refused() -> None:
    result = orchestrator("run", "-m", "study=sweep", "arms.arm.gpus=all", "hydra/launcher=joblib",
                          "hydra.launcher.n_jobs=2", "arms.arm.engine_args.seed=1,2")
    assert result.returncode == 2 and "would share the GPUs" in result.stderr


def test_a_failed_job_in_parallel_workers_gives_the_sweep_its_status(tmp_path: Path) -> None:
    # joblib runs jobs in worker processes: their statuses come back through the launcher (sweep/slurm.py)
    result = orchestrator("run", "-m", "study=sweep", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                          "arms.arm.image=orchestrator/reference-engine:0.1.0,orchestrator/debian-python:bookworm",
                          "protocol.phases.sequential.repeats=2", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 4, result.stderr[-3000:]  # job 1's image has no engine: its arm failed
    assert sorted(json.loads((tmp_path / "sweep.json").read_text())["jobs"]) == ["0", "1"]
