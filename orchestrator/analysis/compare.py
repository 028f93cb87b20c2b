"""Comparison built from the record alone (Parquet), so a report can be re-made without a server.

Cells are (arm, prompt_id, phase) over `measured` requests; an arm's `cold` first request is compared with
the requests of its cell apart, and `warmup` requests are in no cell (docs/conventions.md). Schedules
compare phases within an arm and prompt; pairs compare every arm with the baseline per prompt and phase.
The responses are streamed file by file and cut into cells (analysis/cells.py), so memory holds one cell at a
time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis import batches, explorer, locate, positions, quality
from orchestrator.analysis.cells import Cut, Key, iter_cells
from orchestrator.analysis.control import drift
from orchestrator.analysis.results import (
    BASIS_WORDS,
    SIGNATURE_BASES,
    ArmSummary,
    Cell,
    ColdCheck,
    Comparison,
    PairCheck,
    PooledBound,
    PositionSeries,
    ScheduleCheck,
)
from orchestrator.analysis.stats import (
    ALPHA,
    distribution_test,
    divergence_bound,
    pooled_bound,
    proportional,
    stopped_lower_bound,
)
from orchestrator.engines import EngineProfile, profile_for
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, of

FLIP_POSITIONS = 8  # positions listed in a cell's top1_flip_positions; the rest counted
NEAR_TIE_GAP = 1e-2  # nats: a first divergence whose top1-top2 gap is below this is a near-tie flip


@dataclass
class _Reference:
    """What pairs need of a cell once its rows are gone: how often each signature came, on the cell's basis and
    on the text (what two cells of different bases are compared on)."""

    signatures: dict[str | None, int]
    tokens: np.ndarray | None
    forced: np.ndarray | None
    ok: bool
    texts: dict[str | None, int] = field(default_factory=dict)  # completion signatures
    basis: str = "top_logprobs"  # what `signatures` hash (SIGNATURE_BASES)
    first: str | None = None  # the signature of the cell's first warm request
    sequential: bool = False  # the cell is of a sequential phase
    logprobs: np.ndarray | None = None  # the modal request's chosen tokens' logprobs (analysis/control.py)


BASIS_NOTES = {basis: f"signature: {words.removeprefix('the ')}" for basis, words in BASIS_WORDS.items()
               if basis != "top_logprobs"}


def basis_of(warm: pa.Table) -> str:
    """What the cell's signatures hash: the first basis every row has (SIGNATURE_BASES), else the text."""
    return next((name for name, column in SIGNATURE_BASES.items() if not warm.column(column).null_count), "text")


@dataclass
class _Accumulator:
    """What the cell-by-cell pass collects; `refs` feed the schedules and pairs once every cell is read."""

    result: Comparison = field(default_factory=Comparison)
    refs: dict[Key, _Reference] = field(default_factory=dict)
    capacities: dict[str, int | None] = field(default_factory=dict)  # arm -> requests it runs at once
    explore: explorer.Explorer = field(default_factory=explorer.Explorer)


def compare(recorded: Recorded | RunPaths | list[RunPaths], baseline: str | None = None,
            expectations: dict[str, Any] | None = None, near_tie_gap: float = NEAR_TIE_GAP,
            arm_pairs: list[tuple[str, str]] | None = None, branches: int = explorer.MAX_BRANCHES,
            stop_after_divergences: int | None = None, control: str | None = None) -> Comparison:
    """`arm_pairs`: compare these (a, b) arms instead of every arm against the baseline (sweeps); `branches`:
    the explorer's branches per cell; `stop_after_divergences`: the rule the run stopped cells by; `control`: an
    arm of higher precision every other arm's drift is measured from (analysis/control.py)."""
    recorded = of(recorded)
    acc = _Accumulator(capacities=capacities(recorded), explore=explorer.Explorer(branches, near_tie_gap))
    cold = list[pa.Table]()
    for cut in iter_cells(recorded, cold=cold, texts=bool(expectations)):
        _analyse(cut, acc, (expectations or {}).get(cut.key[1]), near_tie_gap, stop_after_divergences)
    result = acc.result
    cold_rows = [row for table in cold for row in table.to_pylist()]
    result.cold = [_cold_check(row, acc.refs.get((row["arm"], row["prompt_id"], row["phase"]))) for row in cold_rows]
    _against_reference(result.cells, acc.refs, cold_rows)
    arms = list(dict.fromkeys(c.arm for c in result.cells))
    base = baseline if baseline in arms else (arms[0] if arms else None)
    pairs = arm_pairs if arm_pairs is not None else [(base, arm) for arm in arms if base is not None and arm != base]
    result.schedules = _schedules(acc.refs)
    result.pairs = _pairs(acc.refs, pairs)
    result.pooled = _pooled(result.cells)
    if control is not None and control in arms:
        result.control_drift = drift(acc.refs, control)
    result.explorer, result.pair_explorer, result.explorer_left_out = acc.explore.finish(recorded, result.pairs)
    result.inside = locate.attach(result.explorer, recorded)  # where the run has digests
    return result


def _analyse(cut: Cut, acc: _Accumulator, expectation: Any, near_tie_gap: float, stop_after: int | None = None
             ) -> None:
    (arm, prompt_id, phase), key, table = cut.key, cut.key, cut.rows
    ref = _Reference(signatures={}, tokens=None, forced=None, ok=False)
    ok = pc.is_null(errors).to_numpy(zero_copy_only=False) if (errors := table.column("error")).null_count < \
        len(errors) else np.ones(table.num_rows, bool)  # no error: no kernel
    cell = Cell(arm=arm, prompt_id=prompt_id, phase=phase, n=0, errors=int((~ok).sum()), distinct_completions=0,
                distinct_signatures=None, divergent=None, upper_bound_95=None, lower_bound_95=None)
    found, keep = batches.check(cell, acc.capacities.get(arm), table.select(batches.COLUMNS)) if cut.concurrent \
        else ([], np.ones(table.num_rows, bool))  # what check finds without a concurrent row, without its kernels
    acc.result.batches.extend(found)
    warm = table.take(np.nonzero(ok & keep)[0]) if not (ok & keep).all() else table
    cell.n = warm.num_rows
    cell.signature_basis = basis_of(warm)
    sigs = warm.column(SIGNATURE_BASES[cell.signature_basis])
    reference = 0
    if warm.num_rows == 0:
        kept = "no batch shown co-resident" if cell.batches_not_observed else "no co-resident batch"
        cell.signature_note = f"{kept}: kept out of the verdict" if ok.any() else "no successful responses"
    else:
        cell.signature_note = BASIS_NOTES.get(cell.signature_basis, "")
        signed = explorer.Signatures.of(SIGNATURE_BASES[cell.signature_basis], sigs)
        ref.signatures = dict(zip(signed.names, signed.counts.tolist(), strict=True))
        cell.distinct_signatures = len(signed.names)
        cell.divergent = warm.num_rows - int(signed.counts[signed.modal])
        cell.lower_bound_95, cell.upper_bound_95 = divergence_bound(cell.divergent, warm.num_rows)
        if stop_after is not None and cell.divergent >= stop_after:
            # sampled until k divergences: a Clopper-Pearson interval over n is not valid under that stopping
            cell.stopped_after = stop_after
            cell.lower_bound_95, cell.upper_bound_95 = stopped_lower_bound(cell.divergent, warm.num_rows), None
        reference = int(np.argmax(signed.codes == signed.modal))  # the first request of the modal signature
        ref.first = signed.names[int(signed.codes[0])]
        ref.sequential = warm.column("phase_kind")[0].as_py() == "sequential"
        acc.explore.observe(key, warm, table, signed)
    ref.ok, ref.basis = warm.num_rows > 0, cell.signature_basis
    if warm.num_rows:
        texts = pc.value_counts(warm.column("sig_text"))  # its two fields as lists: no dict per value
        ref.texts = dict(zip(texts.field(0).to_pylist(), texts.field(1).to_pylist(), strict=True))
        if (counted := warm.column("top_logprobs_entries")).null_count < len(counted):  # else: none, no kernel
            entries = pc.min_max(pc.list_flatten(counted))
            cell.top_entries_min, cell.top_entries_max = entries["min"].as_py(), entries["max"].as_py()
        cell.distinct_completions = sum(text is not None for text in ref.texts)
        acc.result.positions.append(_positions(cell, warm, reference, ref, near_tie_gap))
        cell.quality_pass, cell.quality_note = quality.pass_share(warm.column("completion_text"), expectation)
    acc.result.cells.append(cell)
    acc.refs[key] = ref


def _cold_check(row: dict[str, Any], ref: _Reference | None) -> ColdCheck:
    """The cold request against its cell's signatures, on the cell's basis."""
    own = row[SIGNATURE_BASES[ref.basis]] if ref is not None else None
    warm = {s for s in ref.signatures if s is not None} if ref is not None else set[str]()
    matches = None if row["error"] or own is None or not warm else own in warm
    return ColdCheck(row["arm"], row["prompt_id"], row["phase"], matches)


def _positions(cell: Cell, warm: pa.Table, reference: int, ref: _Reference, near_tie_gap: float) -> PositionSeries:
    codes = positions.token_codes(warm.column("token_ids"), warm.column("tokens"))
    entry = PositionSeries(cell.arm, cell.prompt_id, cell.phase)
    if codes.size:
        gen = positions.generated_positions(codes, warm.column("token_logprobs"), reference)
        ref.tokens = gen.reference_tokens
        chosen = warm.column("token_logprobs")[reference].as_py() or []
        ref.logprobs = np.array([math.nan if v is None else v for v in chosen], dtype=np.float64)
        cell.first_divergent_position = gen.first_divergent
        parted = np.flatnonzero(np.nan_to_num(gen.spread) > 0)
        cell.first_logprob_position = int(parted[0]) if len(parted) else None
        _flips(cell, gen.flips)
        cell.max_generated_spread = _max(gen.spread)
        entry.generated_spread = _floats(gen.spread)
        if gen.first_divergent is not None:
            gaps = warm.column("top_gaps")[reference].as_py() or []  # top1 - top2 per position, from the writer
            gap = gaps[gen.first_divergent] if gen.first_divergent < len(gaps) else None
            cell.top1_top2_gap = None if gap is None or math.isnan(gap) else gap
            cell.near_tie = None if cell.top1_top2_gap is None else cell.top1_top2_gap < near_tie_gap
    prompt = positions.prompt_positions(warm.column("prompt_logprobs"), reference)
    if prompt is not None:
        ref.forced = prompt.forced_reference
        cell.max_prompt_spread = _max(prompt.spread)
        spread_at = np.nonzero(np.nan_to_num(prompt.spread) > 0)[0]
        cell.first_prompt_position_with_spread = int(spread_at[0]) if len(spread_at) else None
        cell.min_top1_agreement = _min(prompt.top1_agreement)
        cell.min_topk_overlap = _min(prompt.topk_overlap)
        entry.prompt_spread = _floats(prompt.spread)
        entry.top1_agreement = _floats(prompt.top1_agreement)
        entry.topk_overlap = _floats(prompt.topk_overlap)
    return entry


def _flips(cell: Cell, flips: np.ndarray) -> None:
    """The cell's top-1 flips: in all, and the first FLIP_POSITIONS positions that have one, with their counts."""
    at = np.flatnonzero(flips)
    cell.top1_flips, cell.top1_flip_position_count = int(flips.sum()), len(at)
    cell.top1_flip_positions = list(zip(at[:FLIP_POSITIONS].tolist(), flips[at[:FLIP_POSITIONS]].tolist(),
                                        strict=True))


def _against_reference(cells: list[Cell], refs: dict[Key, _Reference], cold_rows: list[dict[str, Any]]) -> None:
    """Each cell's requests against its arm's reference answer for the prompt: the first request of the arm's
    first sequential phase, else its cold request, on the cell's signature basis (docs/onset.md)."""
    sequential: dict[tuple[str, str], _Reference] = {}
    for (arm, prompt_id, _), ref in refs.items():
        if ref.sequential and ref.ok:
            sequential.setdefault((arm, prompt_id), ref)
    colds = {(row["arm"], row["prompt_id"]): row for row in cold_rows if not row["error"]}
    for cell in cells:
        ref, first = refs[(cell.arm, cell.prompt_id, cell.phase)], sequential.get((cell.arm, cell.prompt_id))
        cold = colds.get((cell.arm, cell.prompt_id))
        if not ref.ok:
            continue
        if first is not None and first.basis == ref.basis:
            answer, cell.reference = first.first, "sequential"
        elif cold is not None and cold[SIGNATURE_BASES[ref.basis]] is not None:
            answer, cell.reference = cold[SIGNATURE_BASES[ref.basis]], "cold"
        else:
            continue
        cell.off_reference = cell.n - ref.signatures.get(answer, 0)
        cell.off_reference_of = cell.n - (first is ref)  # the reference request is not compared with itself


def _floats(values: np.ndarray) -> list[float | None]:
    if np.isnan(values).any():
        return [None if math.isnan(v) else float(v) for v in values.tolist()]
    floats: list[float | None] = values.tolist()  # Python floats already: no NaN to replace
    return floats


def _max(values: np.ndarray) -> float | None:
    if values.size and not np.isnan(values).any():  # the usual case: no masked copies
        return float(values.max())
    return None if values.size == 0 or np.all(np.isnan(values)) else float(np.nanmax(values))


def _min(values: np.ndarray) -> float | None:
    return None if values.size == 0 or np.all(np.isnan(values)) else float(np.nanmin(values))


def _verdict(a: _Reference, b: _Reference) -> dict[str, Any]:
    """Two cells' signatures as distributions (their texts', where their bases differ): identical (one and the
    same signature on both sides), same distribution (the same signatures in the same proportions), else
    Fisher-Freeman-Halton's test of the two: differ below ALPHA, no difference shown above; not comparable
    without signatures on both sides."""
    basis = a.basis if a.basis == b.basis else "text"
    ours, theirs = (a.signatures, b.signatures) if a.basis == b.basis else (a.texts, b.texts)
    if not a.ok or not b.ok or None in ours.keys() | theirs.keys():
        return {"verdict": "not comparable", "compared_on": basis}
    names = sorted(ours.keys() | theirs.keys(), key=str)
    counts = [ours.get(name, 0) for name in names], [theirs.get(name, 0) for name in names]
    if proportional(*counts):
        return {"verdict": "identical" if len(names) == 1 else "same distribution", "compared_on": basis}
    test = distribution_test(*counts)
    return {"verdict": "differ" if test.p_value < ALPHA else "no difference shown", "compared_on": basis,
            "test": test.method, "p_value": test.p_value}


def _where(a: _Reference, b: _Reference) -> dict[str, Any]:
    """The verdict and, for cells that differ, where their reference (modal) requests part: first generated
    token, largest prompt logprob gap (the fields of `Divergence`)."""
    verdict = _verdict(a, b)
    first = positions.first_difference(a.tokens, b.tokens) \
        if a.tokens is not None and b.tokens is not None and verdict["verdict"] == "differ" else None
    gap = _max(np.abs(a.forced - b.forced)) \
        if a.forced is not None and b.forced is not None and len(a.forced) == len(b.forced) else None
    return {**verdict, "first_divergent_position": first, "max_prompt_logprob_diff": gap}


def _schedules(refs: dict[Key, _Reference]) -> list[ScheduleCheck]:
    """Within an arm and prompt, each phase against every later one (e.g. sequential vs concurrent)."""
    phases: dict[tuple[str, str], list[str]] = {}
    for arm, prompt_id, phase in refs:
        phases.setdefault((arm, prompt_id), []).append(phase)
    checks = []
    for (arm, prompt_id), names in phases.items():
        for i, phase_a in enumerate(names):
            for phase_b in names[i + 1:]:
                a, b = refs[(arm, prompt_id, phase_a)], refs[(arm, prompt_id, phase_b)]
                checks.append(ScheduleCheck(**_where(a, b), arm=arm, prompt_id=prompt_id, phase_a=phase_a,
                                            phase_b=phase_b))
    return checks


def _pairs(refs: dict[Key, _Reference], arm_pairs: list[tuple[str, str]]) -> list[PairCheck]:
    pairs = []
    missing = _Reference({}, None, None, ok=False)
    for arm_a, arm_b in arm_pairs:
        for (arm, prompt_id, phase), ref in refs.items():
            if arm != arm_b:
                continue
            base = refs.get((arm_a, prompt_id, phase), missing)
            pairs.append(PairCheck(**_where(base, ref), arm_a=arm_a, arm_b=arm_b, prompt_id=prompt_id, phase=phase))
    return pairs


def _pooled(cells: list[Cell]) -> list[PooledBound]:
    """Per arm, its measured cells pooled; a cell the stop rule ended is left out (its n was not fixed) and
    named, so the pool never hides a divergence shown."""
    by_arm: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.divergent is not None:
            by_arm.setdefault(cell.arm, []).append(cell)
    out = []
    for arm, measured in by_arm.items():
        members = [c for c in measured if c.stopped_after is None]
        rate = pooled_bound([c.divergent or 0 for c in members], [c.n for c in members])
        out.append(PooledBound(arm, len(members), **asdict(rate),
                               left_out=[c.label for c in measured if c.stopped_after is not None]))
    return out


def arm_engines(recorded: Recorded) -> dict[str, tuple[EngineProfile, dict[str, Any]]]:
    """Each arm's engine profile, of the engine that answered (a record from before schema 7: the declared one; from
    before `engine:`, the default engine), and its engine_args as the arms table recorded them."""
    return {run.label + arm.arm: (profile_for(arm.engine), arm.config.get("engine_args") or {})
            for run in recorded.runs for arm in run.starts}


def capacities(recorded: Recorded) -> dict[str, int | None]:
    """Each arm's capacity, its profile's max batch setting as the arm set it (None: not set, its default)."""
    return {arm: profile.capacity(engine_args) for arm, (profile, engine_args) in arm_engines(recorded).items()}


def arms_summary(recorded: Recorded) -> list[ArmSummary]:
    return [ArmSummary(run.label + arm.arm, arm.status or "", arm.image_ref, arm.image_id, arm.error)
            for run in recorded.runs for arm in run.starts]
