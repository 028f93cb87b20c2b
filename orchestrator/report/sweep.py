"""A sweep's own report: every job of a Hydra multirun compared as an arm of one study, and the pairs of jobs
whose overrides differ in exactly one swept key (sweep.json, report.md/html/json in the sweep dir). Made by
the sweep's callback when it ends (sweep/callback.py), and again from the record by `compare SWEEP_DIR`.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from orchestrator.record.paths import RunPaths, atomic_write_text


def job_overrides(job_dir: Path) -> dict[str, str]:
    saved = job_dir / ".hydra" / "overrides.yaml"
    overrides = OmegaConf.to_container(OmegaConf.load(saved)) if saved.is_file() else []
    return dict(str(item).lstrip("+~").split("=", 1) for item in overrides or [] if "=" in str(item))


def single_variable_pairs(jobs: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    """(job a, job b, the one key they differ in) for every pair differing in exactly one override."""
    pairs = []
    for a, b in combinations(jobs, 2):
        keys = set(jobs[a]) | set(jobs[b])
        differing = [k for k in sorted(keys) if jobs[a].get(k) != jobs[b].get(k)]
        if len(differing) == 1:
            pairs.append((a, b, differing[0]))
    return pairs


def summarize(sweep_dir: Path, failed: dict[str, str] | None = None) -> dict[str, Any]:
    """`failed`: jobs that left no result (job number -> what the scheduler said): listed, not compared."""
    from orchestrator.record.recorded import Recorded, RunMeta, read_run
    from orchestrator.report import build as report

    failed = failed or {}
    job_dirs = sorted((p for p in sweep_dir.iterdir() if (p / "run.json").is_file() and p.name not in failed),
                      key=lambda p: p.name)
    if not job_dirs:
        return {}
    overrides = {p.name: job_overrides(p) for p in job_dirs}
    swept = sorted({k for o in overrides.values() for k in o
                    if len({o2.get(k) for o2 in overrides.values()}) > 1})
    runs = [read_run(RunPaths(p)) for p in job_dirs]
    arm_names = {run.paths.root.name: [arm.arm for arm in run.starts] for run in runs}
    label = {job: f"{job}/{arms[0]}" for job, arms in arm_names.items() if arms}
    pairs = [(a, b, key) for a, b, key in single_variable_pairs({j: {k: overrides[j].get(k, "") for k in swept}
                                                                  for j in overrides}) if a in label and b in label]
    summary = {"sweep_dir": str(sweep_dir), "swept_keys": swept,
               "jobs": {job: {"arm": label.get(job), "overrides": overrides[job]} for job in overrides},
               "single_variable_pairs": [{"a": label[a], "b": label[b], "key": key} for a, b, key in pairs],
               "failed_jobs": failed}
    atomic_write_text(sweep_dir / "sweep.json", json.dumps(summary, indent=2) + "\n")
    result = report.build(Recorded.of(runs, RunPaths(sweep_dir), RunMeta(
        study=f"{runs[0].meta.study} (sweep)", run_id=sweep_dir.name, sweep=summary,
        arm_pairs=[(label[a], label[b]) for a, b, _ in pairs])))
    return {**summary, "result": result}


def done_line(sweep_dir: Path, summary: dict[str, Any]) -> str:
    return (f"Sweep report: {sweep_dir / 'report.md'} ({len(summary['single_variable_pairs'])} single-variable "
            f"pairs over {', '.join(summary['swept_keys']) or 'no swept key'})")


def is_sweep_dir(path: Path) -> bool:
    """A sweep's dir (its jobs below it), not a run's."""
    return not (path / "run.json").is_file() and ((path / "sweep.json").is_file() or (path / "multirun.yaml").is_file())
