"""Candidate causes: for an arm whose batched (concurrent) cells diverge while its sequential cells agree,
the ops that kernel probes measured batch-variant in that arm's image. The probe rows come from the same
run dir (`orchestrator probe --arm ARM --out RUN_DIR`) and are matched to the arm by image (tag or id). A
candidate, not proof: the probes ran synthetic inputs outside the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.probes import OpVerdict, verdicts
from orchestrator.analysis.results import ArmSummary, Cell, Comparison


@dataclass
class Attribution:
    arm: str
    image: str
    batched_phases: list[str]  # the phases whose cells or schedule checks diverge
    candidates: list[OpVerdict] = field(default_factory=list)  # batch-variant ops measured in the image
    ops_probed: int = 0  # entries x arms that ran in the image


def _agrees(cell: Cell) -> bool:
    return (cell.divergent == 0) if cell.divergent is not None else cell.distinct_completions <= 1


def attribute(comparison: Comparison, arms: list[ArmSummary], probe_rows: list[dict[str, Any]]) -> list[Attribution]:
    """An Attribution per arm with probe rows of its image whose batched cells diverge (within a batched cell,
    or a batched phase against another phase of the same prompt) while every sequential cell agrees."""
    found = []
    for arm in arms:
        images = {i for i in (arm.image_ref, arm.image_id) if i}
        rows = [r for r in probe_rows if r.get("image") in images and not r.get("negative_control")]
        cells = [c for c in comparison.cells if c.arm == arm.arm]
        sequential = [c for c in cells if c.batch_size is None]
        batched = {c.phase for c in cells if c.batch_size is not None}
        diverging = sorted({c.phase for c in cells if c.phase in batched and not _agrees(c)}
                           | {p for s in comparison.schedules if s.arm == arm.arm and s.verdict == "differ"
                              for p in (s.phase_a, s.phase_b) if p in batched})
        sequential_differ = any(s.arm == arm.arm and s.verdict == "differ" and s.phase_a not in batched
                                and s.phase_b not in batched for s in comparison.schedules)
        if not rows or not diverging or not sequential or not all(map(_agrees, sequential)) or sequential_differ:
            continue
        ran = [v for v in verdicts(rows) if v.invariant is not None]
        found.append(Attribution(arm.arm, str(rows[0]["image"]), diverging,
                                 [v for v in ran if v.batch_variant], len(ran)))
    return found
