"""Logic of the parts beyond one machine (their real runs: tests/e2e/test_slurm.py, test_ssh_host.py):
SLURM's answers parsed, failed jobs mapped to exit statuses, the plugin's launchers swapped for ours, ssh
command lines."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import OmegaConf

from orchestrator.errors import ExitStatus
from orchestrator.runtime.slurm import parse_jobs
from orchestrator.runtime.ssh import SshLink
from orchestrator.sweep.app import launcher_overrides
from orchestrator.sweep.slurm import _failure

SCONTROL = (
    "JobId=13 ArrayJobId=12 ArrayTaskId=1 JobName=app JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=n1\n"
    "JobId=14 ArrayJobId=12 ArrayTaskId=2 JobName=app JobState=CANCELLED Reason=None ExitCode=0:15 NodeList=n1\n"
    "JobId=20 JobName=wrap JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0 NodeList=n7\n")


def test_scontrol_lines_become_states_by_array_task() -> None:
    jobs = parse_jobs(SCONTROL)
    assert jobs["12_1"] == {"JobID": "12_1", "State": "TIMEOUT", "Reason": "TimeLimit", "NodeList": "n1",
                            "ExitCode": "0:15"}
    assert jobs["12_2"]["State"] == "CANCELLED" and jobs["20"]["Reason"] == "NodeDown"


class FakeJob:
    def __init__(self, job_id: str, info: dict[str, str]) -> None:
        self.job_id, self.info = job_id, info
        self.paths = SimpleNamespace(stdout=Path(f"/sweep/.submitit/{job_id}/log.out"))

    def get_info(self, mode: str = "force") -> dict[str, str]:
        return self.info


@pytest.mark.parametrize(("state", "error", "status"), [
    ("TIMEOUT", "has not produced any output (state: TIMEOUT)", ExitStatus.MEASUREMENT_FAILED),
    ("NODE_FAIL", "has not produced any output (state: NODE_FAIL)", ExitStatus.MEASUREMENT_FAILED),
    ("CANCELLED by 0", "has not produced any output (state: CANCELLED by 0)", ExitStatus.INTERRUPTED),
    ("FAILED", "failed during processing with trace:\nTraceback (most recent call last):\nValueError: x",
     ExitStatus.INTERNAL),
])
def test_a_job_without_result_gets_slurms_words_and_a_status(state: str, error: str, status: int) -> None:
    job: Any = FakeJob("12_1", {"State": state, "Reason": "TimeLimit", "NodeList": "n1"})
    failed = _failure(job, RuntimeError(error))
    assert failed.return_value == status
    assert failed.reason.startswith(f"Fake job 12_1 {state} (TimeLimit) on n1")
    assert "/sweep/.submitit/12_1/log.out" in failed.reason


def test_the_plugins_launchers_are_swapped_for_ours() -> None:
    def composed(target: str) -> Any:
        return OmegaConf.create({"hydra": {"launcher": {"_target_": target}}})

    plugin = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
    assert launcher_overrides(composed(f"{plugin}.SlurmLauncher")) == [
        "hydra.launcher._target_=hydra_plugins.orchestrator_launcher.launcher.SlurmLauncher"]
    assert launcher_overrides(composed(f"{plugin}.LocalLauncher"))[0].endswith("launcher.LocalLauncher")
    assert launcher_overrides(composed("hydra._internal.core_plugins.basic_launcher.BasicLauncher")) == []


def test_ssh_command_lines_name_port_user_and_the_config_by_home(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SshLink("ssh://gpu-3").base[-2:] == ["--", "gpu-3"] and "-F" not in SshLink("ssh://gpu-3").base
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host gpu-3\n  HostName 10.0.0.3\n")
    base = SshLink("ssh://me@gpu-3:2200").base
    assert base[base.index("-F") + 1] == str(tmp_path / ".ssh" / "config")
    assert base[base.index("-p") + 1] == "2200" and base[base.index("-l") + 1] == "me"
    with pytest.raises(ValueError, match="not an ssh://"):
        SshLink("tcp://10.0.0.3:2376")


def test_a_job_whose_task_raised_counts_as_a_bug_and_the_sweep_goes_on() -> None:
    from hydra.core.utils import JobReturn, JobStatus

    from orchestrator.sweep.slurm import _crashed

    raised = JobReturn()
    raised.status, raised.return_value = JobStatus.FAILED, ValueError("boom")
    failed = _crashed(raised)
    assert failed.return_value == ExitStatus.INTERNAL and "ValueError: boom" in failed.reason


def test_docker_arms_on_slurm_must_name_the_jobs_gpus() -> None:
    from orchestrator import config
    from orchestrator.errors import ConfigError
    from orchestrator.sweep.callback import check_parallel_gpus

    def check(*overrides: str) -> None:
        composed = config.compose(["study=sweep", "hydra/launcher=slurm", *overrides], [])
        check_parallel_gpus(composed, [list(overrides)])

    with pytest.raises(ConfigError, match=r"gpus=all would take every GPU of the node.*SLURM_JOB_GPUS"):
        check("arms.arm.gpus=all")
    check("arms.arm.gpus=${oc.env:SLURM_JOB_GPUS,all}")  # the job's own GPUs, read in the job
    check("arms.arm.gpus=all", "runtime=process")  # a process arm gets the job's CUDA_VISIBLE_DEVICES
    check()  # no GPUs
