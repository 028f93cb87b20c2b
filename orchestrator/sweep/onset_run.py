"""The onset sweeper's two ends: the check `run -m` makes before any job starts (a bad axis, target or
`per` is one line, exit 2), and the search as the plugin runs it: onset.json and the report after each
round, and the answer `run` ends with (docs/onset.md)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.console import Outcome, answer, failed, note
from orchestrator.errors import ConfigError, ExitStatus, OrchestratorError, counted
from orchestrator.sweep.onset_config import (
    EXPECT,
    SWEEPER_TARGET,
    OnsetSettings,
    axis_value_problem,
    grid,
    per_overrides,
    problems,
    resolve_outcome,
    settings,
    target_problems,
    value_text,
)
from orchestrator.sweep.onset_state import FILE, OnsetState, resumed, write

if TYPE_CHECKING:
    from orchestrator.sweep.onset import Launch


class Answer:
    """What the search ended with, for `run` to say after Hydra returns (app.py)."""

    outcome = Outcome()


def is_onset(composed: DictConfig) -> bool:
    return str(OmegaConf.select(composed, "hydra.sweeper._target_", default="")) == SWEEPER_TARGET


def recorded(composed: DictConfig) -> bool:
    """The sweep dir holds an onset search's onset.json: the same command resumes it (docs/onset.md)."""
    return (Path(composed.hydra.sweep.dir) / FILE).is_file()


def check(composed: DictConfig, overrides: list[str], jobs: int, dirs: list[Path]) -> None:
    """Before any job: the settings, then each configuration composed at both ends of the axis, the axis's
    value a number there and the target cells in the study. Raises ConfigError (exit 2)."""
    from orchestrator import config

    s = settings(composed.hydra.sweeper)
    found = problems(s)
    if jobs > 1:
        found.append("the onset sweeper takes no swept overrides (a,b or range()): give each configuration as "
                     "an entry of hydra.sweeper.per, e.g. hydra.sweeper.per='[\"a=1\",\"a=2\"]'")
    if found:
        raise ConfigError(found)
    key = s.axis.key.lstrip("+~")
    if any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides):
        raise ConfigError(f"{key} is both the axis and an override on the command line: drop the override")
    base = OmegaConf.select(composed, key, default=None)
    if problem := axis_value_problem(key, base):
        raise ConfigError(problem)
    for per in per_overrides(s):
        for end in (s.axis.low, s.axis.high):
            assert end is not None
            at_end = config.compose([*overrides, *per, f"{s.axis.key}={value_text(s.axis, end)}"], dirs)
            if problem := axis_value_problem(key, OmegaConf.select(at_end, key, default=None)):
                raise ConfigError(problem)
            typed = config.to_typed(at_end)
        phases = list(typed.protocol.phases)
        if bad := target_problems(s.target, list(typed.arms), list(typed.prompts.prompts), phases):
            raise ConfigError(bad)
    resolved(s, composed)
    task = [o for o in overrides if not o.startswith(("hydra.", "hydra/", "+hydra", "~hydra"))]
    resumed(Path(composed.hydra.sweep.dir), s, task, grid(s.axis))  # another search's onset.json: refused


def resolved(s: OnsetSettings, composed: DictConfig) -> OnsetSettings:
    """The settings with target.outcome chosen for this study (onset_config.resolve_outcome)."""
    from orchestrator import config

    typed = config.to_typed(composed)
    resolve_outcome(s, [phase.kind.name for phase in typed.protocol.phases.values()], list(typed.prompts.prompts))
    return s


def run_search(node: dict[str, Any], arguments: list[str], config: DictConfig, launch: Launch) -> OnsetState | None:
    """The search, as the plugin's `sweep` runs it; what it ends with is kept in Answer (Hydra would turn an
    exception into a traceback and exit 1)."""
    from orchestrator.sweep.onset import search

    try:
        s = settings(node)
        if found := problems(s):
            raise ConfigError(found)
        resolved(s, config)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(config, sweep_dir / "multirun.yaml")  # as Hydra's basic sweeper keeps the sweep's config
        state = resumed(sweep_dir, s, arguments, grid(s.axis))
        before = sum(len(c.jobs) for c in state.configurations)
        state = search(s, state, sweep_dir, launch, lambda st: _write(sweep_dir, st))
    except OrchestratorError as exc:
        Answer.outcome = failed(exc)
        return None
    except KeyboardInterrupt as exc:  # the jobs of the rounds before are in onset.json
        exc.__notes__ = [f"the onset search's finished rounds are in {sweep_dir / FILE}: the same command with "
                     f"hydra.sweep.dir={sweep_dir} resumes it"]  # not the job's run: the search runs that point again
        raise
    resumed_note = note(f"resumed the search in {sweep_dir / FILE}: {counted(before, 'job')} recorded before") \
        if before else Outcome()
    Answer.outcome = resumed_note + answer(*_lines(state, sweep_dir)) + expectation(state, s.expect)
    return state


def expectation(state: OnsetState, expect: str | None) -> Outcome:
    """hydra.sweeper.expect against every configuration's answer: a differing one is a failed gate (exit 3)."""
    if expect is None:
        return Outcome()
    wrong = [f"expected {EXPECT[expect]} (hydra.sweeper.expect={expect}), found "
             f"{(c.result or {}).get('outcome', 'no answer')}" + (f" for [{' '.join(c.per)}]" if c.per else "")
             for c in state.configurations if (c.result or {}).get("outcome") != EXPECT[expect]]
    return note(*wrong, status=ExitStatus.GATE_FAILED) if wrong else Outcome()


def _write(sweep_dir: Path, state: OnsetState) -> None:
    from orchestrator.report.onset import write_reports

    write(sweep_dir, state)
    write_reports(sweep_dir, asdict(state))


def _lines(state: OnsetState, sweep_dir: Path) -> list[str]:
    out = []
    for c in state.configurations:
        result = c.result or {}
        label = f"[{' '.join(c.per)}] " if c.per else ""
        stop = f"; stopped: {result['stop']}" if result.get("stop") not in (None, "", "width", "decided") else ""
        out.append(f"{label}{result.get('line', 'no answer')} ({len(c.jobs)} jobs, "
                   f"{sum(j.requests for j in c.jobs)} requests{stop})")
    out.append(f"Report: {sweep_dir / 'report.md'}  onset.json: {sweep_dir / 'onset.json'}")
    return out
