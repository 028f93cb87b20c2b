"""What a folder given to `orchestrator matrix` holds: a run dir, or an onset search (onset.json, docs/onset.md),
whose jobs' run dirs are its cells, each at its point on the search's axis and the target arm's cells carrying
the search's answer ("onset" column); and, per arm of a run that declares an A/B, what else it changed (the
side-effect audit, report/side_effects_md.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import RecordError
from orchestrator.guard.observed import read as read_guard
from orchestrator.record.paths import read_json
from orchestrator.record.recorded import Recorded, RecordedRun
from orchestrator.report.onset import FILE as ONSET_FILE
from orchestrator.report.side_effects_md import audits


@dataclass(frozen=True)
class Source:
    """One run dir to read, and what its search says of it (none for a run dir given as itself)."""

    run_dir: Path
    at: str = ""  # an onset job's point on its axis ('prompts.prompts.p.length_tokens=2052'): added to its load point
    onset: dict[str, str] = field(default_factory=dict)  # arm -> its search's answer (the target arm's only)


def sources(folders: list[Path]) -> list[Source]:
    """Each folder as its run dirs: itself, or an onset search's recorded jobs (in onset.json's order)."""
    found: list[Source] = []
    for folder in folders:
        state = folder / ONSET_FILE
        found += _jobs(folder, read_json(state)) if state.is_file() else [Source(folder)]
    return found


def _jobs(sweep_dir: Path, state: dict[str, Any]) -> list[Source]:
    settings = state["settings"]
    axis, arm = settings["axis"]["key"], settings["target"]["arm"]
    provisional = "provisional (the search was interrupted): " if state.get("interrupted") else ""
    listed, found = 0, []
    for configuration in state["configurations"]:
        answer = provisional + f"along {axis}: " + ((configuration.get("result") or {}).get("line") or "no answer")
        for job in configuration["jobs"]:
            listed += 1
            run_dir = sweep_dir / job["dir"]
            if (run_dir / "run.json").is_file():
                found.append(Source(run_dir, f"{axis}={job['value']:g}", {arm: answer}))
    if not found:
        raise RecordError(f"{sweep_dir} is an onset search whose jobs' run dirs are not there ({listed} listed in "
                          f"{ONSET_FILE}): pass the search dir with its numbered job dirs")
    return found


def side_effects_of(run: RecordedRun) -> dict[str, str]:
    """Arm -> what else its A/B against the baseline changed ('nothing' for a clean one); arms of no declared A/B:
    absent."""
    return {audit.arm_b: "; ".join(m.text() for m in audit.moved) or "nothing"
            for audit in audits(Recorded.of([run]), read_guard(run.paths))}
