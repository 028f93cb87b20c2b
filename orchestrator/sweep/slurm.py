"""Hydra's submitit launchers (`hydra/launcher=submitit_slurm`, `submitit_local`; and joblib's, for the
statuses), with what a study needs from them. `run` swaps the plugins' classes for these (sweep/app.py);
the plugins do the submitting.

- Every job's exit status comes back to the sweep (the task returns it; the worker pickles it), and a job
  that died without one (cancelled, time limit, node lost, out of memory, a crash) is reported with
  SLURM's state and reason, not raised: the other jobs' results and the sweep report still come, and the
  sweep exits with the worst status (docs/conventions.md): cancelled 130, a crash 1, the rest 4.
- In the job, SIGTERM (scancel, the time limit, preemption: SLURM's warning before SIGKILL) interrupts the
  study as Ctrl-C does, so its containers are stopped and removed: they are not in the job's cgroup, and
  nothing else would. submitit's requeue-on-signal is off: a study is not checkpointable.
- Without an accounting database (sacct answers nothing), the job states come from scontrol.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from hydra.core.utils import JobReturn, JobStatus

from orchestrator.console import Outcome, note
from orchestrator.errors import ExitStatus

# SLURM job state -> the sweep's exit status for a job that left no result
STATE_STATUS = {"CANCELLED": ExitStatus.INTERRUPTED, "PREEMPTED": ExitStatus.INTERRUPTED}


class Outcomes:
    """What the launcher learnt, for `run` and the sweep report (the launcher runs in `run`'s process)."""

    outcome = Outcome()  # every job's status, and a line for each that SLURM ended
    failed: ClassVar[dict[str, str]] = {}  # job number -> what SLURM said

    @classmethod
    def reset(cls) -> None:
        cls.outcome, cls.failed = Outcome(), {}


class Reporting:
    """Mixed into the plugin's launchers (hydra_plugins/orchestrator_launcher: Hydra loads launchers from
    that namespace only)."""

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:  # in the SLURM job
        from orchestrator.interrupts import interruptible

        signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # submitit's "time is nearly up": SIGTERM follows
        with interruptible():  # SIGTERM (scancel, the time limit) cleans up as Ctrl-C does
            result: JobReturn = super().__call__(*args, **kwargs)  # type: ignore[misc]
        return result

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        with _tolerant_results():
            results: Sequence[JobReturn] = super().launch(job_overrides, initial_job_idx)  # type: ignore[misc]
        results = [_crashed(r) if r.status is JobStatus.FAILED else r for r in results]
        for number, result in enumerate(results, start=initial_job_idx):
            code = result.return_value if isinstance(result.return_value, int) else int(ExitStatus.INTERNAL)
            Outcomes.outcome += Outcome(statuses=(code,))
            if isinstance(result, _Failed):
                Outcomes.failed[str(number)] = result.reason
                overrides = " ".join(job_overrides[number - initial_job_idx])
                Outcomes.outcome += note(f"error: sweep job {number} ({overrides}): {result.reason}")
        return results


OURS = "hydra_plugins.orchestrator_launcher.launcher"
PLUGIN_TARGETS = {"hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher": f"{OURS}.SlurmLauncher",
                  "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher": f"{OURS}.LocalLauncher",
                  "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher": f"{OURS}.JoblibLauncher"}


class _Failed(JobReturn):
    reason: str = ""


def _crashed(result: JobReturn) -> _Failed:
    """A job whose task raised (a bug; Hydra caught it in the job): status 1, and the other jobs still count."""
    error = result._return_value
    failed = _Failed()
    failed.status, failed.return_value = JobStatus.COMPLETED, int(ExitStatus.INTERNAL)
    failed.reason = f"the job raised (a bug): {type(error).__name__}: {error}"
    return failed


def _failure(job: Any, exc: Exception) -> _Failed:
    info = dict(job.get_info(mode="force")) if hasattr(job, "get_info") else {}
    if "Reason" not in info and type(job).__name__ == "SlurmJob":  # sacct says the state, scontrol why
        from orchestrator.runtime.slurm import job_states

        info.update({k: v for k, v in job_states({job.job_id.split("_")[0]}).get(job.job_id, {}).items() if v})
    state = str(info.get("State") or getattr(job, "state", "") or "UNKNOWN")
    words = [f"{type(job).__name__.removesuffix('Job')} job {job.job_id} {state}"]
    if info.get("Reason") and info["Reason"] != "None":
        words.append(f"({info['Reason']})")
    if info.get("NodeList"):
        words.append(f"on {info['NodeList']}")
    trace = str(exc).strip().splitlines()
    last = next((line for line in reversed(trace) if line.strip() and not line.startswith("-")), "")
    status = STATE_STATUS.get(state.split()[0], ExitStatus.MEASUREMENT_FAILED)
    if "KeyboardInterrupt" in str(exc) and state.startswith(("CANCELLED", "PREEMPTED")):
        status = ExitStatus.INTERRUPTED
    elif state.startswith(("COMPLETED", "FAILED", "UNKNOWN")) and "Traceback" in str(exc):
        status = ExitStatus.INTERNAL  # the job's Python raised: a bug
    failed = _Failed()
    failed.status, failed.return_value = JobStatus.COMPLETED, int(status)
    failed.reason = " ".join(words) + (f": {last}" if last else "") + f"; log: {job.paths.stdout}"
    return failed


@contextlib.contextmanager
def _tolerant_results() -> Iterator[None]:
    """While the plugin collects `job.results()`: a job that left no result gives a `_Failed` return
    instead of raising (which would lose the other jobs and the report), and job states come from
    scontrol when sacct has none. The plugin's own code stays as it is."""
    from submitit.core import core, utils
    from submitit.slurm import slurm

    from orchestrator.runtime.slurm import has_accounting, job_states

    sacct = has_accounting()

    class Watcher(slurm.SlurmInfoWatcher):
        def update(self) -> None:
            if sacct:
                return super().update()
            self._num_calls += 1
            pending = self._registered - self._finished
            self._info_dict.update(job_states({job.split("_")[0] for job in pending}))
            self._last_status_check = time.time()
            self._finished |= {job for job in pending if self.is_done(job, mode="cache")}
            return None

    original_results, original_watcher = core.Job.results, slurm.SlurmJob.watcher

    def results(job: Any) -> Any:
        try:
            return original_results(job)
        except (utils.UncompletedJobError, utils.FailedJobError) as exc:
            return [_failure(job, exc)]

    core.Job.results = results  # type: ignore[method-assign,assignment]
    slurm.SlurmJob.watcher = Watcher(delay_s=5)  # polls scontrol or sacct at most every 5 s
    try:
        yield
    finally:
        core.Job.results = original_results  # type: ignore[method-assign]
        slurm.SlurmJob.watcher = original_watcher
