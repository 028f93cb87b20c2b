"""Candidate causes: for an arm whose batched (concurrent) cells diverge while its sequential cells agree,
the ops that kernel probes measured batch-variant in that arm's image. The probe rows come from the same
run dir (`orchestrator probe --arm ARM [--local] --out RUN_DIR`) and are matched to the arm by identity: the
probe row's `image_id` is the arm's `image_id` (an image id, or a process arm's code identity). Rows written
before the probes had an identity (record schema < 4) match by image tag or id. A candidate, not proof: the
probes ran synthetic inputs outside the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.probes import OpVerdict, verdicts
from orchestrator.analysis.results import ArmSummary, Cell, Comparison


@dataclass
class Attribution:
    arm: str
    image: str  # the image as the probe rows name it (a tag, or a process arm's ref)
    identity: str | None  # what the probes ran in: the arm's image id or code identity
    batched_phases: list[str]  # the phases whose cells or schedule checks diverge
    candidates: list[OpVerdict] = field(default_factory=list)  # batch-variant ops measured in the image
    ops_probed: int = 0  # entries x arms that ran in the image

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attribution:
        """As report.json holds it (`dataclasses.asdict`)."""
        return cls(**{**data, "candidates": [OpVerdict(**v) for v in data.get("candidates") or []]})


def _same_code(row: dict[str, Any], arm: ArmSummary) -> bool:
    """The probe ran what the arm ran: the same identity; a row without one (older records) by tag or id."""
    if row.get("image_id") is not None:
        return bool(arm.image_id) and row["image_id"] == arm.image_id
    return row.get("image") in {i for i in (arm.image_ref, arm.image_id) if i}


def _agrees(cell: Cell) -> bool:
    return (cell.divergent == 0) if cell.divergent is not None else cell.distinct_completions <= 1


def attribute(comparison: Comparison, arms: list[ArmSummary], probe_rows: list[dict[str, Any]]) -> list[Attribution]:
    """An Attribution per arm with probe rows of its image whose batched cells diverge (within a batched cell,
    or a batched phase against another phase of the same prompt) while every sequential cell agrees."""
    found = []
    for arm in arms:
        rows = [r for r in probe_rows if _same_code(r, arm) and not r.get("negative_control")]
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
        found.append(Attribution(arm.arm, str(rows[0]["image"]), rows[0].get("image_id"), diverging,
                                 [v for v in ran if v.batch_variant], len(ran)))
    return found
