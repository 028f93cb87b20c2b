"""`orchestrator check [--config-dir DIR] [-m] [OVERRIDES]`: every refusal `run` would make (run/refusals.py),
the problems at once; 0 or 2. Nothing is started."""

from __future__ import annotations

from orchestrator.console import Outcome, answer, note
from orchestrator.errors import ConfigError, counted
from orchestrator.verbs.arguments import asks_help, hydra_line

USAGE = """usage: orchestrator check [--config-dir DIR] [-m] [HYDRA OVERRIDES...]

Every check `run` makes before it starts an arm, with the same overrides (-m: a sweep's, its sweep dir);
every problem at once, one line each; exit 0 or 2. Nothing is started, no run dir is made."""


def main(argv: list[str]) -> Outcome:
    from orchestrator.config import prefix_flush, workload
    from orchestrator.guard import declared, versions
    from orchestrator.report.table import size
    from orchestrator.run.refusals import expected_record_bytes, refusals, run_dir_of, study_config
    from orchestrator.sweep import onset_run
    from orchestrator.sweep.app import jobs

    if asks_help(argv):
        return answer(USAGE)
    line = hydra_line("check", argv, "-m", "--multirun")
    # a sweep (-m, or a config that makes itself one, hydra.mode): every job's config, as `run` checks them
    sweeps = line.sweeps() or line.sweeps(study_config(line.overrides, line.dirs)[0])
    each = jobs(line.overrides, line.dirs) if sweeps else [line.overrides]
    warnings: dict[str, None] = {}  # every job's, as `run` says them, each once
    for number, job in enumerate(each, 1):
        composed, typed, found = study_config(job, line.dirs)
        checked = refusals(typed, found, "check", run_dir_of(composed, sweeps))
        named = f"job {number} ({' '.join(job)}): " if len(each) > 1 else ""
        if checked.problems:
            raise ConfigError([named + problem for problem in checked.problems])
        warnings.update(dict.fromkeys(named + w for w in declared.warnings(declared.declared_check(
            typed, checked.arms)) + workload.warnings(typed) + prefix_flush.warnings(typed, checked.arms)
            + [note.line for note in versions.check_notes(typed, checked.knobs)]))
    said = [f"ok sweep: {counted(len(each), 'job')}, each checked; below, the last one's"] if sweeps else []
    if sweeps and onset_run.is_onset(composed):  # axis, target and `per`, as `run -m` checks them
        onset_run.check(composed, line.overrides, len(each), line.dirs)
        said = ["ok onset search: its axis, target and per; its jobs are made as it goes (docs/onset.md)"]
    return (note(*(f"warning: {warning}" for warning in warnings))
            + answer(*said, f"ok config: study {typed.study.name}, {counted(len(typed.arms), 'arm')}, protocol "
                     f"{typed.protocol.name}, {counted(len(typed.prompts.prompts), 'prompt')}; guard: declared "
                     "variables and caches",
                     f"ok images, ports, run dir, disk (record about {size(expected_record_bytes(typed))})",
                     "ok knobs: " + "; ".join(f"{arm}: {k.flags_known} flags, {k.env_known} env names known"
                                              + (f" (from {k.listed_from})" if k.listed_from else "")
                                              if k.checked else f"{arm}: not checked ({k.reason})"
                                              for arm, k in checked.knobs.items()))
            + note("check passed: nothing was started"))
