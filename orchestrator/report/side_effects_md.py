"""The report's "What else it changed" section: for each A/B the study declares (study.variables, baseline against an
arm), the side-effect audit (guard/side_effects.py): every config leaf, fingerprint field, held fact, knob listing
and memory peak that moved besides what the declaration accounts for."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.guard.results import GuardResult
from orchestrator.guard.side_effects import SideEffects, side_effects
from orchestrator.record.recorded import Recorded


def audits(recorded: Recorded, guard: GuardResult | None) -> list[SideEffects]:
    """One audit per declared A/B of a single run that recorded its study (.hydra/config.yaml); [] for a run that
    declares nothing, or several runs compared as one study (their arms came from several configs)."""
    declared = guard.declared if guard else None
    if len(recorded.runs) != 1 or declared is None or not declared.checked:
        return []
    run = recorded.runs[0]
    if not (run.paths.hydra / "config.yaml").is_file():
        return []
    ran = {s.arm for s in run.starts}
    return [side_effects(run, declared.baseline, pair.arm) for pair in declared.pairs
            if pair.declared is not None and {declared.baseline, pair.arm} <= ran]


def section(found: Sequence[SideEffects]) -> list[str]:
    if not found:
        return []
    lines = ["## What else it changed", "",
             "Per A/B, everything the guard sees move besides what its declaration accounts for (the declared "
             "leaves, and the fingerprint fields study.implications lists for them): config leaves (a flag with "
             "the neutral setting its engine's profile maps it to), fingerprint fields (packages, env, GPU, the "
             "startup log's facts, the server's own), held facts, the knob listings, and the memory peaks of every "
             "start (apart by more than a fifth). docs/guard.md, \"What else it changed\".", "",
             "| A/B | declared | what else it changed | accounted for by the declaration | not compared |",
             "| --- | --- | --- | --- | --- |"]
    for audit in found:
        moved = "; ".join(f"{m.kind}: {m.text()}" + (f" (the declared {m.allowed_by} lets it)" if m.allowed_by
                                                      else "") for m in audit.moved) or "nothing"
        if audit.moved:
            moved = f"**{moved}**"
        lines.append(f"| {audit.arm_b} vs {audit.arm_a} | {', '.join(audit.declared) or '-'} | {moved} | "
                     f"{'; '.join(m.text() for m in audit.explained) or '-'} | {'; '.join(audit.unknown) or '-'} |")
    return [*lines, ""]

