"""Where variation remains on an engine that records activation digests (the hooked engine): `locate` on the first
cell that varied, in the run dir of the step that showed it, as `orchestrator locate RUN --cell CELL` runs it
(analysis/locate.py, in this process); its first split (the module, the engine step) becomes the finding's
evidence, and the op probe at that module's shapes the next command. An engine without digests gets no such
step: its findings name the op probes next."""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestrator.analysis.locate import locate
from orchestrator.engines import profile_for
from orchestrator.errors import ConfigError, RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.report.locate import headline
from orchestrator.triage.state import DONE, SKIPPED, StepOutcome, TriageState
from orchestrator.triage.steps import AS_GIVEN

NAME = "locate"
CELL_STEPS = ("floor", "concurrent", "length", "load")  # the steps whose cells carry digests (triage/steps.py)


def records_digests(engine: str) -> bool:
    return profile_for(engine).capabilities.digests


def first_cell(step: StepOutcome) -> str | None:
    """The first cell of the arm as given that varied in a step, as ARM/PROMPT/PHASE: a cell of several signatures
    (its two branches), else a concurrent cell whose answers differ from the sequential ones (`locate` takes its
    request against the sequential phase's); None where only the cold request or the starts varied."""
    mine = [c for c in step.cells if c.arm == AS_GIVEN]
    divergent = next((c for c in mine if c.divergent), None)
    if divergent is not None:
        return f"{AS_GIVEN}/{divergent.prompt}/{divergent.phase}"
    for pair in step.schedule_differs:
        arm, prompt = pair.split("/", 1)
        beside = next((c.phase for c in mine if c.prompt == prompt and c.phase != "sequential"), None)
        if arm == AS_GIVEN and beside is not None:
            return f"{AS_GIVEN}/{prompt}/{beside}"
    return None


def locate_step(state: TriageState, moot: str = "") -> StepOutcome:
    """`locate` on the first cell that varied, unless `moot` says why not (a switch explained the variation) or no
    cell varied."""
    if moot:
        return StepOutcome(NAME, SKIPPED, reason=moot)
    varied = [s for s in (state.steps.get(n) for n in CELL_STEPS) if s and s.status == DONE and first_cell(s)]
    if not varied:
        return StepOutcome(NAME, SKIPPED, reason="no cell varied to locate")
    step = varied[0]
    cell = first_cell(step)
    assert cell is not None
    command = shlex.join(["orchestrator", "locate", step.run_dir, "--cell", cell])
    try:
        located = locate(RunPaths(Path(step.run_dir)), cell)
    except (RecordError, ConfigError) as exc:  # no digests for the cell, or no pair: said, as `locate` says it
        return StepOutcome(NAME, SKIPPED, reason=f"{cell}: {exc}", run_dir=step.run_dir, command=command)
    diff = located.difference
    split = f"{diff.module} ({diff.module_type}) at step {diff.step}" if diff else ""
    probe = (f"the op probe at its shapes: `{located.probe.command}`",) if located.probe else ()
    return StepOutcome(NAME, DONE, run_dir=step.run_dir, command=command,
                       answer=(f"{cell}: {headline(located)}", *probe), split=split)
