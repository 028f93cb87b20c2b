"""Hydra's submitit and joblib launchers as `orchestrator run` uses them (it swaps them in for
`submitit_slurm`, `submitit_local` and `joblib`): orchestrator/sweep/slurm.py says what they add."""

from __future__ import annotations

import contextlib

from hydra_plugins.hydra_submitit_launcher import submitit_launcher as plugin

from orchestrator.sweep.slurm import Reporting


class SlurmLauncher(Reporting, plugin.SlurmLauncher):
    pass


class LocalLauncher(Reporting, plugin.LocalLauncher):
    pass


with contextlib.suppress(ImportError):  # the `launchers` extra
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher as _Joblib

    class JoblibLauncher(Reporting, _Joblib):
        pass
