"""The verdict first: one sentence per question the study asks (is each arm repeatable per phase, does the
schedule matter, does the A/B differ beyond the A/A noise, does the cold request differ), with the numbers
and bounds behind it, then the gate's verdict. Never the word "deterministic": how many distinct in how many,
and the bound on the divergence rate that this sample supports."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.gate import failures as gate_failures
from orchestrator.analysis.results import BatchCheck, Cell, Comparison, Divergence
from orchestrator.analysis.stats import ALPHA
from orchestrator.config.noise_floor import copy_name
from orchestrator.engines import profile_for
from orchestrator.errors import counted

GATE_KEYS = ("max_divergence_rate", "expect_pairs", "expect_schedules")


@dataclass
class GateVerdict:
    verdict: str  # passed | failed | not set
    stated: dict[str, Any] = field(default_factory=dict)  # the gate's set fields
    problems: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        if self.verdict == "not set":
            return ("Gate: not set (to have one, set gate.max_divergence_rate, gate.expect_pairs or "
                    "gate.expect_schedules, or pass compare's gate flags).")
        stated = ", ".join(f"{k} " + (", ".join(f"{arm}={want}" for arm, want in v.items()) if isinstance(v, dict)
                                      else str(v)) for k, v in self.stated.items())
        if self.verdict == "passed":
            return f"Gate: passed ({stated})."
        return f"Gate: FAILED ({stated}): " + "; ".join(self.problems) + "."


def gate_verdict(comparison: Comparison, gate: dict[str, Any] | None) -> GateVerdict:
    stated = {k: v for k, v in (gate or {}).items() if k in GATE_KEYS and v not in (None, {}, [])}
    if not stated:
        return GateVerdict("not set")
    problems = gate_failures(comparison, stated)
    return GateVerdict("failed" if problems else "passed", stated, problems)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def divergence(cell: Cell, near_tie_gap: float) -> str:
    """Where the cell's requests first part, and whether that is a near-tie flip."""
    if cell.first_divergent_position is None:
        return ""
    text = f", first divergence at token {cell.first_divergent_position}"
    if cell.top1_top2_gap is not None:
        what = "a near-tie" if cell.near_tie else f"not a near-tie (>= {near_tie_gap:g})"
        text += f", top-1/top-2 gap {cell.top1_top2_gap:.3g}: {what}"
    return text


def unobserved(cells: Sequence[Cell | BatchCheck], why: Mapping[str, str] | None) -> str:
    """Why co-residency went unseen, as the engine profiles of the cells' arms say (`why`: per arm, the
    profile's `unobserved()`; an arm not in it, the default engine's, as for a record from before `engine:`)."""
    why = why or {}
    return "; ".join(sorted({why.get(c.arm) or profile_for(None).unobserved() for c in cells}))


def together(batched: list[Cell], why: Mapping[str, str] | None = None) -> str:
    """How many of the cells' batches ran together: the least seen, NOT co-resident, not observed (a /metrics
    sample that missed every batch: no count, kept out) or not observable (the engine shows none)."""
    seen = [c.min_running_observed for c in batched if c.min_running_observed is not None]
    total = sum(c.batches or 0 for c in batched)
    missed = sum(c.batches_not_observed or 0 for c in batched)
    not_observed = (f"co-residency not observed in {missed} of {counted(total, 'batch', 'batches')} (no "
                    "/metrics sample showed it running; kept out of the verdict)")
    if not seen:
        return not_observed if missed else f"co-residency not observable ({unobserved(batched, why)})"
    said = f"co-resident {min(seen)}"
    if any(c.co_resident is False for c in batched):
        out = sum(c.batches_kept_out or 0 for c in batched) - missed
        said = (f"NOT co-resident (at most {min(seen)} running together; {out} of "
                f"{counted(total, 'batch', 'batches')} kept out of the verdict)")
    return said + (f"; {not_observed}" if missed else "")


def phase_clause(phase: str, cells: list[Cell], near_tie_gap: float, why: Mapping[str, str] | None = None) -> str:
    """`sequential: 1 distinct in 30 (<= 9.5 % at 95 %)` over the phase's prompts."""
    head = phase
    batched = [c for c in cells if c.batch_size is not None]
    if batched:
        size = min(c.batch_size or 0 for c in batched)
        capacity = min((c.capacity for c in batched if c.capacity is not None), default=None)
        on = f" on capacity {capacity}" if capacity is not None and size > capacity else ""
        head = f"{phase} {size}{on}, {together(batched, why)}"
    measured = [c for c in cells if c.distinct_signatures is not None]
    if not measured:
        note = next((c.signature_note for c in cells if c.signature_note), "no signatures")
        return f"{head}: {note}"
    prompts = f" for each of {len(cells)} prompts" if len(cells) > 1 else ""
    varying = [c for c in measured if c.distinct_signatures != 1]
    if not varying:
        loosest = min(measured, key=lambda c: c.n)
        most = max(c.n for c in measured)
        n = f"{loosest.n}" if most == loosest.n else f"{loosest.n}-{most}"
        smallest = " in the smallest" if most != loosest.n else ""
        return f"{head}: 1 distinct in {n}{prompts} (<= {pct(loosest.upper_bound_95)} at 95 %{smallest})"
    worst = max(varying, key=lambda c: (c.distinct_signatures or 0, -(c.first_divergent_position or 0)))
    which = f" (prompt {worst.prompt_id}; {len(varying)} of {len(cells)} prompts vary)" if len(cells) > 1 else ""
    bound = stopped_rate(worst) if worst.stopped_after is not None else \
        f"divergence rate {pct(worst.lower_bound_95)}-{pct(worst.upper_bound_95)} at 95 %"
    return (f"{head}: {worst.distinct_signatures} distinct in {worst.n}{which}, {bound}"
            f"{divergence(worst, near_tie_gap)}")


def stopped_rate(cell: Cell) -> str:
    """A cell protocol.stop_after_divergences ended: what its sample shows, and no more."""
    return (f"stopped after {cell.divergent} divergent in {cell.n} (stop_after_divergences="
            f"{cell.stopped_after}): divergence shown; rate >= {pct(cell.lower_bound_95)} at 95 %, "
            "not estimated beyond this lower bound")


def sample_size(comparison: Comparison, rules: dict[str, Any] | None) -> list[str]:
    """The sentence saying how many requests the cells took and why (run.json `sample_size`)."""
    if not rules or (rules.get("target_bound") is None and rules.get("stop_after_divergences") is None):
        return []
    parts = []
    if (bound := rules.get("target_bound")) is not None:
        sizes = ", ".join(f"{phase} {n}" for phase, n in (rules.get("cell_requests") or {}).items())
        parts.append(f"protocol.target_bound={bound:g}: each cell planned for <= {pct(bound)} at 95 % with no "
                     f"divergence ({sizes} measured requests per cell)")
    if (k := rules.get("stop_after_divergences")) is not None:
        measured = [c for c in comparison.cells if c.divergent is not None]
        stopped = sum(c.stopped_after is not None for c in measured)
        parts.append(f"protocol.stop_after_divergences={k}: {stopped} of {len(measured)} cells stopped once {k} "
                     "request(s) diverged from the modal signature (lower bound only); the others ran their full n "
                     "and keep the usual bound")
    return ["Sample size: " + "; ".join(parts) + "."]


# The pair verdicts (analysis/compare.py `_verdict`), most telling first.
VERDICTS = ("differ", "no difference shown", "same distribution", "identical")
# What a coarser signature basis means for a verdict, said beside it.
COMPARED_ON = {"text": "compared on completion text only", "token_ids": "compared on token ids only"}


def compared_on(bases: list[str]) -> str:
    """'compared on completion text only' (every cell), '2 of 6 cells compared on ...' (some), '' (none)."""
    coarse = Counter(b for b in bases if b in COMPARED_ON)
    return ", ".join(COMPARED_ON[b] if n == len(bases) else f"{n} of {len(bases)} cells {COMPARED_ON[b]}"
                     for b, n in coarse.items())


def _tally(rows: list[Divergence], word: str) -> str:
    """`differ for 1, identical for 2`: each verdict's count, most telling first."""
    counts = Counter(r.verdict for r in rows)
    return ", ".join(f"{v} {word} {counts[v]}" for v in (*VERDICTS, "not comparable") if counts[v])


def _by_pair(comparison: Comparison) -> dict[tuple[str, str], list[Divergence]]:
    pairs: dict[tuple[str, str], list[Divergence]] = {}
    for p in comparison.pairs:
        pairs.setdefault((p.arm_a, p.arm_b), []).append(p)
    return pairs


def _differ(rows: list[Divergence], what: str) -> str:
    """`identical for 3 of 3 prompts`, `differ for 1, same distribution for 2 of 3 prompts (first differing
    token 5; ...)`: each verdict's count, the test that judged the cells whose signatures vary, and the basis
    where it was coarser than the top logprobs."""
    comparable = [r for r in rows if r.verdict != "not comparable"]
    if not comparable:  # nothing compared: no count of identical ones (never "identical for 0")
        return f"not comparable for {len(rows)} of {len(rows)} {what}"
    text = f"{_tally(comparable, 'for')} of {len(rows)} {what}"
    notes = []
    first = [r.first_divergent_position for r in comparable if r.first_divergent_position is not None]
    if first:
        notes.append(f"first differing token {min(first)}")
    tested = [r for r in comparable if r.p_value is not None]
    if tested:
        p_values = sorted(r.p_value for r in tested if r.p_value is not None)
        low, high = f"{p_values[0]:.2g}", f"{p_values[-1]:.2g}"
        p = f"p = {low}" if low == high else f"p {low}-{high}"
        methods = " or ".join(dict.fromkeys(r.test for r in tested))
        notes.append(f"{len(tested)} judged on their signature distributions by the {methods}: {p}, "
                     f"where differ means p < {ALPHA:g}")
    text += f" ({'; '.join(notes)})" if notes else ""
    if basis := compared_on([r.compared_on for r in comparable]):
        text += f", {basis}"
    return text + (f", {len(rows) - len(comparable)} not comparable" if len(comparable) < len(rows) else "")


def sentences(comparison: Comparison, failed_arms: list[str], near_tie_gap: float,
              why: Mapping[str, str] | None = None) -> list[str]:
    """One sentence per question, in the order a reader asks them (`why`: see `unobserved`)."""
    out = [f"Measurement FAILED for arm(s) {', '.join(failed_arms)}: their numbers below are incomplete."] \
        if failed_arms else []
    by_arm: dict[str, dict[str, list[Cell]]] = {}
    for cell in comparison.cells:
        by_arm.setdefault(cell.arm, {}).setdefault(cell.phase, []).append(cell)
    for arm, phases in by_arm.items():
        clauses = [phase_clause(phase, cells, near_tie_gap, why) for phase, cells in phases.items()]
        schedules: dict[tuple[str, str], list[Divergence]] = {}
        for s in comparison.schedules:
            if s.arm == arm:
                schedules.setdefault((s.phase_a, s.phase_b), []).append(s)
        clauses += [f"{a} vs {b}: {_differ(rows, 'prompts')}" for (a, b), rows in schedules.items()]
        cold: dict[tuple[str, str], bool] = {}  # per cell: a resumed arm's restart sent a cold request of its own
        for c in comparison.cold:
            if c.arm == arm and c.matches_warm is not None:
                cold[(c.prompt_id, c.phase)] = cold.get((c.prompt_id, c.phase), True) and c.matches_warm
        if cold:
            differ = sum(not matches for matches in cold.values())
            clauses.append(f"cold first request differs from warm in {differ} of {len(cold)} cells" if differ
                           else f"cold first request matches warm in {len(cold)} of {len(cold)} cells")
        signed = [c.signature_basis for cells in phases.values() for c in cells if c.distinct_signatures is not None]
        basis = compared_on(signed)
        out.append(f"{arm}{f' ({basis})' if basis else ''}: " + "; ".join(clauses) + ".")
    pairs = _by_pair(comparison)
    for (a, b), rows in pairs.items():
        if b == copy_name(a):
            out.append(f"A/A {b} vs {a} (the noise floor: two starts of one config): "
                       f"{_differ(rows, 'prompt x phase cells')}.")
            continue
        noise = [c for c in comparison.cells if c.arm in (a, b) and (c.distinct_signatures or 1) > 1]
        differ = any(r.verdict == "differ" for r in rows)
        # within an arm's own repeats (the noise floor of two starts, study.noise_floor, is read below)
        varies = counted(len(noise), "cell varies", "cells vary")
        floor = f"within the arms {varies}, compared as signature distributions" if noise \
            else "one signature in every cell of either arm" + (", so the difference lies between the arms"
                                                                if differ else "")
        floor += _against_floor(rows, pairs.get((a, copy_name(a))))
        out.append(f"A/B {b} vs {a}: {_differ(rows, 'prompt x phase cells')}; {floor}.")
    return out


def _against_floor(rows: list[Divergence], floor: list[Divergence] | None) -> str:
    """An A/B read against the A/A of two starts of its baseline, cell by cell (study.noise_floor)."""
    if floor is None:
        return ""
    ab = {(r.prompt_id, getattr(r, "phase", "")) for r in rows if r.verdict == "differ"}
    aa = {(r.prompt_id, getattr(r, "phase", "")) for r in floor if r.verdict == "differ"}
    if not ab:
        return f"; noise floor: the A/A differs in {len(aa)} of {len(floor)} cells" if aa else ""
    within = ab & aa
    if within == ab:
        return f"; within the noise floor: the A/A differs in all {len(ab)} of the differing cells too"
    return (f"; beyond the noise floor in {len(ab - within)} of {len(ab)} differing cells (the A/A does not differ "
            "there)")


def summary(comparison: Comparison) -> str:
    """One line for `ls` and `show` (report.json `summary`): each arm's repeatability, then each pair's verdicts,
    with the basis where it was coarser than the top logprobs."""
    by_arm: dict[str, list[Cell]] = {}
    for cell in comparison.cells:
        by_arm.setdefault(cell.arm, []).append(cell)
    parts = []
    for arm, cells in by_arm.items():
        measured = [c for c in cells if c.distinct_signatures is not None]
        basis = compared_on([c.signature_basis for c in measured])
        varied = sum(c.distinct_signatures != 1 for c in measured)
        # a cell without signatures (no successful answer, its batches kept out) counts for neither
        repeatable = f"varies in {varied} of {len(cells)} cells" if varied else \
            f"one signature in {len(measured)} of {len(cells)} cells" if measured else \
            f"not measured in any of {counted(len(cells), 'cell')}"
        unmeasured = len(cells) - len(measured)
        repeatable += f", {unmeasured} not measured" if unmeasured and measured else ""
        parts.append(f"{arm}: {repeatable}{f', {basis}' if basis else ''}")
    for (a, b), rows in _by_pair(comparison).items():
        basis = compared_on([r.compared_on for r in rows if r.verdict != "not comparable"])
        parts.append(f"{'A/A' if b == copy_name(a) else 'A/B'} {b} vs {a}: {_tally(rows, 'in')} of {len(rows)} "
                     f"cells{f', {basis}' if basis else ''}")
    return "; ".join(parts)
