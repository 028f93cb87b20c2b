"""The `run` verb is a Hydra app: one study per job (a multirun sweeps them, through a launcher), each
into Hydra's run dir. Every job's config is composed and checked before the first starts; every job
runs even when one fails, and the exit status is the worst job's (docs/conventions.md)."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator import config
from orchestrator.config.schema import Config
from orchestrator.config.search import CommandLine, overrides_for
from orchestrator.config.security import OWN_CONFIG_ALLOW
from orchestrator.console import Outcome, failed, finish
from orchestrator.errors import ConfigError, OrchestratorError, worst
from orchestrator.record.paths import RunPaths
from orchestrator.run.execute import execute_study, preflight
from orchestrator.run.refusals import Refusals, refusals, run_dir_of, run_dir_problems, study_config
from orchestrator.run.timings import StageTimer

MAX_CHECKED_JOBS = 256  # jobs whose configs are composed up front; a bigger sweep checks the first ones
PRECHECK_S = {"seconds": 0.0}  # composing and checking every job up front, for the first job's timings
# Whether this process ran one study as a single run, composed once (`run_composed`): no sweep, no launcher
# (a joblib pool is shut down by the interpreter's exit hooks), so __main__ may leave without them.
ALONE = {"ran": False}


def jobs(overrides: list[str], dirs: list[Path]) -> list[list[str]]:
    """Every job's overrides, as Hydra's basic sweeper makes them: sweep values (a,b / range() /
    choice() / glob()) parsed by Hydra's own override parser, in their cartesian product."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    from orchestrator.config.compose import group_options

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # Hydra's grammar errors
        raise ConfigError(f"{' '.join(str(exc).split())}") from exc
    axes = []
    for override, text in zip(parsed, overrides, strict=True):
        if not override.is_sweep_override():
            axes.append([text])
            continue
        key = override.get_key_element()
        value = override.value()
        if isinstance(value, Glob):
            values = value.filter(group_options(override.key_or_group, dirs))
        else:
            values = list(override.sweep_string_iterator())
        axes.append([f"{key}={v}" for v in values])
    return [list(job) for job in itertools.islice(itertools.product(*axes), MAX_CHECKED_JOBS)]


def run_with_hydra(line: CommandLine) -> Outcome:
    """Check every job's composed config first (a typo is one clear line and exit 2, before anything
    starts), then hand the command line to Hydra's main, which makes the run dirs and calls `run_study`."""
    dirs, flags, overrides = line.dirs, list(line.flags), list(line.overrides)
    recorded = [d for d in dirs if (d / "config.yaml").is_file() and (d / "overrides.yaml").is_file()]
    if recorded:  # `--config-dir RUN/.hydra --config-name config`: Hydra's way to name a recorded run
        from orchestrator.reproduce.rerun import refused_overrides, run_from

        if line.sweeps():
            raise refused_overrides(recorded[0])
        # as `run --from RUN --out DIR`
        out = line.value("--out", "a dir: run --config-dir RUN/.hydra --config-name config --out DIR")
        return run_from(recorded[0].parent, Path(out) if out else None, [], overrides)  # hydra.run.dir & co only
    if "--out" in flags:  # Hydra would print its whole usage
        raise ConfigError("run takes no --out for a new study: name its run dir with hydra.run.dir=DIR (--out is for "
                          "a re-run: run --from RUN --out DIR)")
    started = time.perf_counter()
    sweeps = line.sweeps()
    if not flags:  # one study, unless the config makes itself a sweep: composed once, checked, run as Hydra runs it
        composed, typed, found = study_config(overrides, dirs)
        sweeps = line.sweeps(composed)
        if not sweeps:  # every refusal, as `check` makes them, before Hydra makes the run dir
            checked = refusals(typed, found, "check", run_dir_of(composed, sweeps))
            if checked.problems:
                raise ConfigError(checked.problems)
            PRECHECK_S["seconds"] = time.perf_counter() - started
            return run_composed(composed, typed, checked)
        if found:
            raise ConfigError(found)
    if sweeps and not line.to_hydra():  # Hydra's own flags, --cfg, --help, ..., go straight to it
        last = None
        for job in jobs(overrides, dirs):
            last = config.compose(job, dirs)
            preflight(config.to_typed(last))
        if last is not None:
            from orchestrator.sweep import onset_run

            onset = onset_run.is_onset(last)
            # an onset search's own sweep dir resumes it (onset_run.check refuses another search's)
            if not (onset and onset_run.recorded(last)) and (problems := run_dir_problems(last, sweeps)):
                raise ConfigError(problems)
            from orchestrator.sweep.callback import check_parallel_gpus

            check_parallel_gpus(last, jobs(overrides, dirs))
            if onset:  # axis, target and `per` checked before any job (docs/onset.md)
                onset_run.check(last, overrides, len(jobs(overrides, dirs)), dirs)
            overrides += launcher_overrides(last)
    PRECHECK_S["seconds"] = time.perf_counter() - started
    import hydra

    from orchestrator.config.schema import register_configs

    register_configs()
    status: dict[str, int] = {"code": 0}

    @hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name=config.CONFIG_NAME)
    def task(cfg: Any) -> int:
        code = finish(run_study(cfg))  # each job's summary as it ends
        status["code"] = worst(status["code"], code)
        return code  # a launcher running jobs elsewhere (submitit) brings it back: sweep/slurm.py

    from orchestrator.sweep import onset_run
    from orchestrator.sweep.callback import SweepCompare
    from orchestrator.sweep.slurm import Outcomes

    saved = sys.argv
    sys.argv = ["orchestrator", *flags, *overrides, *overrides_for(dirs)]
    SweepCompare.outcome = Outcome()
    onset_run.Answer.outcome = Outcome()
    Outcomes.reset()
    try:
        task()
    finally:
        sys.argv = saved
    return Outcome(statuses=(status["code"],)) + Outcomes.outcome + SweepCompare.outcome + onset_run.Answer.outcome


def run_composed(composed: Any, typed: Config, checked: Refusals) -> Outcome:
    """What Hydra's main does for a single run (its Hydra.run), on the config composed once: Hydra's main
    would compose it twice more (once to learn the mode, once to run), about 0.2 s each. Run dir, .hydra/,
    logging and callbacks are Hydra's own (run_job)."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext, RunMode
    from omegaconf import open_dict

    with open_dict(composed.hydra):  # as Hydra's main records a run
        composed.hydra.mode = RunMode.RUN
        composed.hydra.overrides.hydra.append("hydra.mode=RUN")
    configure_log(composed.hydra.hydra_logging, composed.hydra.verbose)
    callbacks = Callbacks(composed)
    callbacks.on_run_start(config=composed, config_name=config.CONFIG_NAME)
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(config.CONF_DIR)))
    ALONE["ran"] = True  # before it runs: an interrupted study (raised through run_job) leaves the same way
    ran = run_job(hydra_context=HydraContext(config_loader=loader, callbacks=callbacks),
                  task_function=lambda cfg: run_study(cfg, typed, checked), config=composed,
                  job_dir_key="hydra.run.dir", job_subdir_key=None)
    callbacks.on_run_end(config=composed, config_name=config.CONFIG_NAME, job_return=ran)
    outcome: Outcome = ran.return_value  # re-raises what the task raised
    return outcome


def launcher_overrides(composed: Any) -> list[str]:
    """Hydra's submitit launchers, as sweep/slurm.py completes them (job statuses, SLURM's reasons, SIGTERM
    cleaning up): the same plugin and options, our class."""
    from orchestrator.sweep.slurm import PLUGIN_TARGETS

    target = str(composed.hydra.launcher.get("_target_", ""))
    return [f"hydra.launcher._target_={PLUGIN_TARGETS[target]}"] if target in PLUGIN_TARGETS else []


def run_study(cfg: Any, typed: Config | None = None, checked: Refusals | None = None) -> Outcome:
    """The Hydra task: one study into Hydra's run dir (`typed`: `cfg` already checked, `checked` what the
    checks found). Returns its outcome; never raises for what the orchestrator reports itself, so the other
    jobs of a sweep still run."""
    from hydra.core.hydra_config import HydraConfig

    try:
        timer = StageTimer()
        timer.add("compose_and_check", PRECHECK_S["seconds"])  # once for a sweep: its first job carries it
        PRECHECK_S["seconds"] = 0.0
        with timer.stage("compose_job"):
            typed = typed or config.to_typed(cfg)
        paths = RunPaths(Path(HydraConfig.get().runtime.output_dir))
        return execute_study(typed, paths, list(typed.runtime.allow), OWN_CONFIG_ALLOW, timer=timer,
                             checked=checked)
    except OrchestratorError as exc:  # said as the command line says it
        return failed(exc)
