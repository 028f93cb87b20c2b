"""A triage's state, TRIAGE_DIR/triage.json, written atomically after every step: the arm and budget it was
started with, and each step's outcome (its run dir, its re-run command, what it found). The same command run
again, or `triage --resume DIR`, reads it and goes on with the first step not done (docs/triage.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.record.paths import atomic_write_text, read_json

STATE_FILE = "triage.json"
SCHEMA_VERSION = 1
DONE, SKIPPED, FAILED = "done", "skipped", "failed"


@dataclass(frozen=True)
class Cell:
    """One cell a step measured: its arm (as_given or the switch's), phase and prompt, k of n divergent, the
    distinct signatures, and the 95 % interval of its divergence rate."""

    arm: str
    phase: str
    prompt: str
    n: int
    divergent: int
    distinct: int
    lower_95: float
    upper_95: float


@dataclass(frozen=True)
class StepOutcome:
    """What one step found, read from its run dir's report.json and guard.json (triage/observe.py)."""

    name: str
    status: str  # done, skipped (then `reason` says why), failed (its run's measurement failed)
    reason: str = ""
    run_dir: str = ""
    command: str = ""
    requests: int = 0  # what it sent, against the budget
    cells: tuple[Cell, ...] = ()
    cold_differs: tuple[str, ...] = ()  # arm/prompt whose cold first request differs from its warm repeats
    schedule_differs: tuple[str, ...] = ()  # arm/prompt whose sequential and concurrent answers differ
    starts: int = 0
    starts_ready: int = 0
    start_failure_upper_95: float | None = None
    signatures_across_starts: int = 0  # the most distinct first answers of one prompt across starts
    answer: tuple[str, ...] = ()  # an onset search's answer (sweep/onset_run.py's lines)
    known_issues: tuple[str, ...] = ()  # lines of the guard's known issues that affect the arm
    side_effects: tuple[str, ...] = ()  # what else the switch moved (the side-effect audit), where it ran
    load_cost: tuple[str, ...] = ()  # what the arm cost at a load point, with intervals over its windows
    load_ratios: tuple[str, ...] = ()  # an A/B at a load point: the other arm against the arm as given, paired
    split: str = ""  # `locate`'s first split, "MODULE (TYPE) at step S" (triage/inside.py)
    # what each arm cost, from its starts: arm -> peak memory, host and GPU (bytes), time to ready (s)
    peak_memory_bytes: dict[str, float] = field(default_factory=dict)
    peak_gpu_memory_bytes: dict[str, float] = field(default_factory=dict)
    time_to_ready_s: dict[str, float] = field(default_factory=dict)

    def divergent(self, arm: str) -> tuple[int, int]:
        """k of n divergent over the arm's cells."""
        mine = [c for c in self.cells if c.arm == arm]
        return sum(c.divergent for c in mine), sum(c.n for c in mine)

    def varies(self, arm: str) -> bool:
        """Whether the arm showed any variation in this step: a divergent cell, a cold first request unlike the
        warm ones, sequential unlike concurrent, or first answers unlike across starts."""
        return (self.divergent(arm)[0] > 0 or any(d.startswith(f"{arm}/") for d in self.cold_differs)
                or any(d.startswith(f"{arm}/") for d in self.schedule_differs)
                or (arm == "as_given" and self.signatures_across_starts > 1))

    def shown(self) -> str:
        """What the arm as given showed, in a word: a step whose study failed to measure showed neither."""
        return "varies" if self.varies("as_given") else "repeatable" if self.status == DONE else "not measured"

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StepOutcome:
        return cls(**{**doc, "cells": tuple(Cell(**c) for c in doc.get("cells") or ()),
                      **{k: tuple(doc.get(k) or ()) for k in ("cold_differs", "schedule_differs", "answer",
                                                               "known_issues", "side_effects", "load_cost",
                                                               "load_ratios")}})


@dataclass
class TriageState:
    """The triage's arm (its name, and the command it was asked with), its budget, and the steps done."""

    arm: str
    asked: list[str]  # the triage's own arguments, to tell a resume of this triage from another's
    budget_requests: int
    steps: dict[str, StepOutcome] = field(default_factory=dict)

    @property
    def spent(self) -> int:
        return sum(step.requests for step in self.steps.values())

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "arm": self.arm, "asked": self.asked,
                "budget_requests": self.budget_requests, "steps": [asdict(s) for s in self.steps.values()]}


def state_path(out: Path) -> Path:
    return out / STATE_FILE


def load(out: Path) -> TriageState | None:
    """The triage in `out`, or None where none was started there."""
    path = state_path(out)
    if not path.is_file():
        return None
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{path} is not a triage's state this version writes: give another --out")
    steps = [StepOutcome.from_json(s) for s in doc["steps"]]
    return TriageState(arm=doc["arm"], asked=list(doc["asked"]), budget_requests=int(doc["budget_requests"]),
                       steps={s.name: s for s in steps})


def save(out: Path, state: TriageState) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(state_path(out), json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
