"""What SLURM says about jobs, from `scontrol show job` (slurmctld's memory: a finished job stays there for
MinJobAge, 300 s by default). submitit asks `sacct`, which needs an accounting database; clusters (and
the single-node cluster of scripts/ci-hosts.sh) without one answer nothing there, and a job that died
without a result would be waited for forever."""

from __future__ import annotations

import subprocess


def has_accounting() -> bool:
    """Whether sacct answers (an accounting database is configured)."""
    try:
        return subprocess.run(["sacct", "-n", "-j", "1"], capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def job_states(job_ids: set[str]) -> dict[str, dict[str, str]]:
    """{'12_0': {'JobID': '12_0', 'State': 'TIMEOUT', 'Reason': 'TimeLimit', 'NodeList': 'vm',
    'ExitCode': '0:15'}, ...} for the jobs (array jobs by their main id) scontrol still knows."""
    if not job_ids:
        return {}
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", ",".join(sorted(job_ids))], capture_output=True,
                             text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_jobs(out)


def parse_jobs(out: str) -> dict[str, dict[str, str]]:
    """`scontrol show job -o` output (one job a line, KEY=VALUE words) -> job_states' shape."""
    states = {}
    for line in out.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "JobId" not in fields:
            continue
        task = fields.get("ArrayTaskId", "")
        key = f"{fields['ArrayJobId']}_{task}" if task and task.isdigit() else fields["JobId"]
        states[key] = {"JobID": key, "State": fields.get("JobState", "UNKNOWN"), "Reason": fields.get("Reason", ""),
                       "NodeList": fields.get("NodeList", ""), "ExitCode": fields.get("ExitCode", "")}
    return states
