"""Hydra multirun sweeps: each job runs one arm; when the sweep ends, every job is compared as an arm
of one study, and the pairs of jobs whose overrides differ in exactly one swept key are compared.

    orchestrator run -m study=sweep +arms.arm.engine_args.fused-finalize=true,false \\
        arms.arm.engine_args.max-num-seqs=8,16

The callback (registered in conf/config.yaml under hydra.callbacks) writes report.md/html/json and
sweep.json into the sweep dir (report/sweep.py); `orchestrator compare SWEEP_DIR` re-makes them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from orchestrator.console import Outcome, answer, failed, note
from orchestrator.errors import ExitStatus
from orchestrator.report.sweep import done_line, summarize
from orchestrator.runtime.traits import traits_of


def check_parallel_gpus(composed: DictConfig, jobs: list[list[str]]) -> None:
    """Parallel jobs (hydra-joblib-launcher with n_jobs != 1) must not share a GPU: refuse a sweep whose
    arms ask for GPUs unless the jobs give them distinct devices."""
    from orchestrator.errors import ConfigError

    launcher = str(composed.hydra.launcher.get("_target_", ""))
    if launcher.endswith(".SlurmLauncher") and traits_of(str(composed.runtime.kind)).own_cgroup:
        check_slurm_gpus(composed)
    n_jobs = composed.hydra.launcher.get("n_jobs", 1)
    if "joblib" not in launcher or n_jobs == 1:
        return
    gpus_per_job = [{o for o in job if o.split("=", 1)[0].endswith(".gpus")} for job in jobs]
    with_gpus = [name for name, arm in composed.arms.items() if arm.gpus is not None]
    distinct = len({frozenset(g) for g in gpus_per_job}) == len(jobs)
    if with_gpus and not distinct:
        raise ConfigError(f"parallel jobs (joblib, n_jobs={n_jobs}) would share the GPUs of arm(s) "
                          f"{', '.join(with_gpus)}: sweep arms.X.gpus over distinct devices (e.g. "
                          "arms.arm.gpus=0,1) or set hydra.launcher.n_jobs=1")


def check_slurm_gpus(composed: DictConfig) -> None:
    """SLURM jobs that share a node each get their GPUs, but a Docker arm with `gpus: all` would get every
    GPU of the node (the engine is outside the job's cgroup): refuse it, naming the job's own GPUs."""
    from orchestrator.errors import ConfigError

    raw = OmegaConf.to_container(composed.arms, resolve=False)
    assert isinstance(raw, dict)
    whole = [str(name) for name, arm in raw.items() if isinstance(arm, dict) and arm.get("gpus") == "all"]
    if whole:
        raise ConfigError(f"on SLURM, Docker arm(s) {', '.join(whole)} with gpus=all would take every GPU of "
                          f"the node, also those of other jobs: give each the job's own, "
                          f"arms.{whole[0]}.gpus='${{oc.env:SLURM_JOB_GPUS,all}}', or use runtime=process, "
                          "where gpus=all means the job's CUDA_VISIBLE_DEVICES (docs/hosts.md)")


class SweepCompare(Callback):
    """Hydra callback: after a multirun, compare its jobs as arms of one study. Hydra swallows a callback's
    exceptions (a warning), so what it ends with, a report that could not be made too, is kept in `outcome`
    for `run` to end with (console.py)."""

    outcome = Outcome()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from orchestrator.errors import OrchestratorError
        from orchestrator.sweep.onset_run import is_onset
        from orchestrator.sweep.slurm import Outcomes

        if is_onset(config):  # the onset sweeper wrote its own report (sweep/onset_run.py)
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            summary = summarize(sweep_dir, Outcomes.failed)
        except OrchestratorError as exc:
            SweepCompare.outcome = failed(exc)
            return
        except Exception as exc:  # a bug: say so, and make the sweep fail rather than pass silently
            SweepCompare.outcome = note(f"error: the sweep report failed (a bug): {type(exc).__name__}: {exc}",
                                        status=ExitStatus.INTERNAL)
            return
        if summary:
            SweepCompare.outcome = answer(done_line(sweep_dir, summary))
        elif {p.name for p in sweep_dir.iterdir()} <= {"multirun.yaml"}:  # every job refused before it started:
            shutil.rmtree(sweep_dir)  # nothing left, not even Hydra's multirun.yaml (a dir that looks used)
