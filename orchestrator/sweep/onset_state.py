"""onset.json: an onset search's settings and every job so far, versioned, rewritten after each round so that
an interrupted search keeps its history; the same hydra.sweep.dir resumes it (docs/onset.md)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.sweep.onset_config import OnsetSettings

VERSION = 1
FILE = "onset.json"
# What a resumed search must share with the recorded one: the same question, asked of the same grid
SAME_SEARCH = ("axis", "target", "per", "prior_below", "prior_above")


@dataclass
class Job:
    job: int  # Hydra's job number: its run dir is the sweep dir's subdir of that name
    value: float  # the axis value it ran at
    index: int  # its grid index
    dir: str  # run dir, relative to the sweep dir where it is inside it
    status: int  # the job's exit status
    k: int | None = None  # target outcome count (None: the job gave no usable cell)
    n: int | None = None
    requests: int = 0  # requests the job sent (every cell's n and errors, and cold requests)
    prompt_tokens: int | None = None  # the target cells' usage.prompt_tokens (their most common value)
    first_divergent_position: int | None = None  # generated index of the earliest flipped token
    note: str = ""
    first_logprob_position: int | None = None  # generated index where the logprobs first differ


@dataclass
class Configuration:
    per: list[str]  # this configuration's own overrides
    jobs: list[Job] = field(default_factory=list)
    result: dict[str, Any] | None = None  # the latest summary (sweep/onset.py Result)
    done: bool = False


@dataclass
class OnsetState:
    settings: dict[str, Any]
    arguments: list[str]  # the command line's overrides every job shares
    grid: list[float]
    configurations: list[Configuration]
    version: int = VERSION
    interrupted: bool = False  # Ctrl-C or SIGTERM in a round: the answers so far are provisional
    # job dirs an interrupted round left: not evidence (a job cut short); the resumed search plans its points again
    abandoned: list[str] = field(default_factory=list)

    @property
    def next_job(self) -> int:
        return 1 + max((j.job for c in self.configurations for j in c.jobs), default=-1)

    def first_free(self, sweep_dir: Path) -> int:
        """The next job's number: after the recorded jobs and after any job dir an interrupted round left
        (its run is not in onset.json; that point is run again under a new number)."""
        left = [int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()] \
            if sweep_dir.is_dir() else []
        return max([self.next_job, *(n + 1 for n in left)])

    def stopped(self, sweep_dir: Path) -> None:
        """Ctrl-C or SIGTERM: the answers are provisional, and the job dirs not recorded as jobs are the
        interrupted round's (not counted; kept, and named as such)."""
        recorded = {j.dir for c in self.configurations for j in c.jobs} | set(self.abandoned)
        left = sorted((p.name for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=int)
        self.interrupted, self.abandoned = True, [*self.abandoned, *(d for d in left if d not in recorded)]


def write(sweep_dir: Path, state: OnsetState) -> Path:
    path = sweep_dir / FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)  # never half a file, even when interrupted mid-write
    return path


def read(sweep_dir: Path) -> OnsetState | None:
    path = sweep_dir / FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        if raw.get("version") != VERSION:
            raise ConfigError(f"{path} is onset.json version {raw.get('version')}, this orchestrator reads "
                              f"version {VERSION}: give the search another hydra.sweep.dir")
        configurations = [Configuration(c["per"], [Job(**j) for j in c["jobs"]], c.get("result"), c["done"])
                          for c in raw["configurations"]]
        return OnsetState(raw["settings"], raw["arguments"], raw["grid"], configurations, raw["version"],
                          bool(raw.get("interrupted")), list(raw.get("abandoned") or []))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a readable onset.json ({type(exc).__name__}: {exc}): move it away or "
                          "give the search another hydra.sweep.dir") from exc


def resumed(sweep_dir: Path, settings: OnsetSettings, arguments: list[str], grid: list[float]) -> OnsetState:
    """The recorded search in `sweep_dir`, to continue (budgets and width may change), or a new one."""
    now = asdict(settings)
    state = read(sweep_dir)
    if state is None:
        return OnsetState(now, arguments, grid, [Configuration(p.split()) for p in settings.per or [""]])
    differ = [f"{k}: recorded {state.settings.get(k)}, now {now[k]}" for k in SAME_SEARCH
              if state.settings.get(k) != now[k]]
    if state.arguments != arguments:
        differ.append(f"the command line's overrides: recorded {state.arguments}, now {arguments}")
    if differ:
        raise ConfigError(f"{sweep_dir / FILE} records another search ({'; '.join(differ)}): resume it with "
                          "the same settings, or give this one another hydra.sweep.dir")
    state.settings, state.interrupted = now, False
    for c in state.configurations:
        c.done = False  # a larger budget or a narrower width may take it further
    return state
