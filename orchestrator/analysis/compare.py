"""Comparison built from the record alone (Parquet), so a report can be re-made without a server.

Cells are (arm, prompt_id, phase) over warm requests; the cold first request of an arm is compared
with the warm requests of its cell apart. Schedules compare phases within an arm and prompt; pairs
compare every arm with the baseline per prompt and phase. The responses are streamed file by file:
the writer lands each cell's rows contiguously, so memory holds one cell at a time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis import positions, quality
from orchestrator.analysis.results import (
    ArmSummary,
    Cell,
    ColdCheck,
    Comparison,
    PairCheck,
    PooledBound,
    PositionSeries,
    ScheduleCheck,
)
from orchestrator.analysis.stats import divergence_bound, pooled_bound
from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import iter_batches, read_table

KEY = ("arm", "prompt_id", "phase")
COLUMNS = ["arm", "prompt_id", "phase", "phase_kind", "batch_id", "cold", "error", "completion_text",
           "sig_text", "sig_token_ids", "sig_top_logprobs", "token_ids", "tokens", "token_logprobs",
           "top_gaps", "top_logprobs_entries", "prompt_logprobs", "batch_send_spread_ns", "batch_running_max"]
NEAR_TIE_GAP = 1e-2  # nats: a first divergence whose top1-top2 gap is below this is a near-tie flip


@dataclass
class _Reference:
    """What pairs need of a cell once its rows are gone."""

    signatures: set[str | None]
    tokens: np.ndarray | None
    forced: np.ndarray | None
    ok: bool


@dataclass
class _Accumulator:
    """What the cell-by-cell pass collects; `refs` feed the schedules and pairs once every cell is read."""

    result: Comparison = field(default_factory=Comparison)
    refs: dict[tuple[str, str, str], _Reference] = field(default_factory=dict)
    capacities: dict[str, int | None] = field(default_factory=dict)  # arm -> requests it runs at once


def _labelled(sources: RunPaths | list[RunPaths]) -> list[tuple[RunPaths, str]]:
    """Several run dirs compare as one study: their arms become '<run dir name>/<arm>'."""
    if isinstance(sources, RunPaths):
        return [(sources, "")]
    if len(sources) == 1:
        return [(sources[0], "")]
    return [(p, f"{p.root.name}/") for p in sources]


def _batches(sources: RunPaths | list[RunPaths], columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    for paths, label in _labelled(sources):
        for batch in iter_batches(paths, "responses", columns, batch_rows):
            if label:
                arms = pc.binary_join_element_wise(label, batch.column("arm"), "")
                batch = batch.set_column(batch.schema.get_field_index("arm"), "arm", arms)
            yield batch


def iter_cells(sources: RunPaths | list[RunPaths], batch_rows: int = 4096
               ) -> Iterator[tuple[tuple[str, str, str], pa.Table]]:
    current: tuple[str, str, str] | None = None
    buffer: list[pa.Table] = []
    done: set[tuple[str, str, str]] = set()
    for batch in _batches(sources, COLUMNS, batch_rows):
        keys = list(zip(*(batch.column(k).to_pylist() for k in KEY), strict=True))
        start = 0
        for i in range(1, len(keys) + 1):
            if i < len(keys) and keys[i] == keys[start]:
                continue
            key = keys[start]
            if key != current:
                if current is not None:
                    yield current, pa.concat_tables(buffer)
                    done.add(current)
                if key in done:
                    raise RecordError(f"rows of cell {key} are not contiguous in the responses record; "
                                      "was the folder merged by hand?")
                current, buffer = key, []
            buffer.append(pa.Table.from_batches([batch.slice(start, i - start)]))
            start = i
    if current is not None:
        yield current, pa.concat_tables(buffer)


def compare(sources: RunPaths | list[RunPaths], baseline: str | None = None,
            expectations: dict[str, Any] | None = None, near_tie_gap: float = NEAR_TIE_GAP,
            arm_pairs: list[tuple[str, str]] | None = None) -> Comparison:
    """`arm_pairs`: compare these (a, b) arms instead of every arm against the baseline (sweeps)."""
    acc = _Accumulator(capacities=capacities(sources))
    for key, table in iter_cells(sources):
        _analyse(key, table, acc, (expectations or {}).get(key[1]), near_tie_gap)
    result = acc.result
    arms = list(dict.fromkeys(c.arm for c in result.cells))
    base = baseline if baseline in arms else (arms[0] if arms else None)
    pairs = arm_pairs if arm_pairs is not None else [(base, arm) for arm in arms if base is not None and arm != base]
    result.schedules = _schedules(acc.refs)
    result.pairs = _pairs(acc.refs, pairs)
    result.pooled = _pooled(result.cells)
    return result


def _analyse(key: tuple[str, str, str], table: pa.Table, acc: _Accumulator, expectation: Any,
             near_tie_gap: float) -> None:
    arm, prompt_id, phase = key
    ok = pc.is_null(table.column("error")).to_numpy(zero_copy_only=False)
    cold_rows = pc.fill_null(table.column("cold"), False).to_numpy(zero_copy_only=False)
    warm = table.take(np.nonzero(ok & ~cold_rows)[0]) if not (ok & ~cold_rows).all() else table
    cell = Cell(arm=arm, prompt_id=prompt_id, phase=phase, n=warm.num_rows,
                errors=int((~cold_rows).sum()) - warm.num_rows, distinct_completions=0, distinct_signatures=None,
                divergent=None, upper_bound_95=None, lower_bound_95=None)
    batches = table.select(["phase_kind", "batch_id", "batch_send_spread_ns", "batch_running_max"])
    _co_residency(cell, acc.capacities.get(arm), batches.take(np.nonzero(~cold_rows)[0]))
    sigs = warm.column("sig_top_logprobs")
    reference = 0
    if warm.num_rows == 0:
        cell.signature_note = "no successful responses"
    elif sigs.null_count:
        cell.signature_note = "no top logprobs returned: signature comparison not possible"
    else:
        counts = pc.value_counts(sigs).to_pylist()
        modal = max(counts, key=lambda c: c["counts"])
        cell.distinct_signatures = len(counts)
        cell.divergent = warm.num_rows - modal["counts"]
        cell.lower_bound_95, cell.upper_bound_95 = divergence_bound(cell.divergent, warm.num_rows)
        reference = sigs.to_pylist().index(modal["values"])
    ref = _Reference(signatures=set(sigs.to_pylist()), tokens=None, forced=None, ok=warm.num_rows > 0)
    if warm.num_rows:
        entries = pc.list_flatten(warm.column("top_logprobs_entries"))
        cell.top_entries_min, cell.top_entries_max = pc.min(entries).as_py(), pc.max(entries).as_py()
        cell.distinct_completions = pc.count_distinct(warm.column("sig_text")).as_py()
        acc.result.positions.append(_positions(cell, warm, reference, ref, near_tie_gap))
        cell.quality_pass, cell.quality_note = quality.pass_share(warm.column("completion_text").to_pylist(),
                                                                  expectation)
    acc.result.cells.append(cell)
    acc.refs[key] = ref
    cold = table.select(["sig_top_logprobs", "sig_text", "error"]).take(np.nonzero(cold_rows)[0])
    if cold.num_rows:
        own = cold.column("sig_top_logprobs")[0].as_py() or cold.column("sig_text")[0].as_py()
        warm_sigs = {s for s in ref.signatures if s is not None} or set(warm.column("sig_text").to_pylist())
        matches = None if cold.column("error")[0].as_py() or own is None or not warm_sigs else own in warm_sigs
        acc.result.cold.append(ColdCheck(arm, prompt_id, phase, matches))


def _positions(cell: Cell, warm: pa.Table, reference: int, ref: _Reference, near_tie_gap: float) -> PositionSeries:
    codes = positions.token_codes(warm.column("token_ids"), warm.column("tokens"))
    entry = PositionSeries(cell.arm, cell.prompt_id, cell.phase)
    if codes.size:
        gen = positions.generated_positions(codes, warm.column("token_logprobs"), reference)
        ref.tokens = gen.reference_tokens
        cell.first_divergent_position = gen.first_divergent
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


def _co_residency(cell: Cell, capacity: int | None, rows: pa.Table) -> None:
    """Co-resident (shared/CONVENTIONS.md): the server showed min(N, C) of a batch of N running together,
    C the arm's capacity (its max-num-seqs) where known."""
    if rows.num_rows == 0 or "concurrent" not in set(rows.column("phase_kind").to_pylist()):
        return
    sizes = pc.value_counts(rows.column("batch_id")).to_pylist()
    cell.batch_size = min(s["counts"] for s in sizes)
    spread = pc.max(rows.column("batch_send_spread_ns")).as_py()
    cell.max_send_spread_ms = None if spread is None else spread / 1e6
    running = pc.min(rows.column("batch_running_max")).as_py()
    cell.min_running_observed = running
    cell.capacity = capacity
    cell.co_resident = None if running is None else running >= min(cell.batch_size, capacity or cell.batch_size)


def _floats(values: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values.tolist()]


def _max(values: np.ndarray) -> float | None:
    return None if values.size == 0 or np.all(np.isnan(values)) else float(np.nanmax(values))


def _min(values: np.ndarray) -> float | None:
    return None if values.size == 0 or np.all(np.isnan(values)) else float(np.nanmin(values))


def _verdict(a: _Reference, b: _Reference) -> str:
    """identical: both sides show one and the same signature; differ: anything else comparable."""
    if not a.ok or not b.ok or None in a.signatures | b.signatures:
        return "not comparable"
    return "identical" if a.signatures == b.signatures and len(a.signatures) == 1 else "differ"


def _where(a: _Reference, b: _Reference) -> dict[str, Any]:
    """The verdict and where two cells' reference requests part: first generated token, largest prompt
    logprob gap (the fields of `Divergence`)."""
    first = positions.first_difference(a.tokens, b.tokens) if a.tokens is not None and b.tokens is not None \
        else None
    gap = _max(np.abs(a.forced - b.forced)) \
        if a.forced is not None and b.forced is not None and len(a.forced) == len(b.forced) else None
    return {"verdict": _verdict(a, b), "first_divergent_position": first, "max_prompt_logprob_diff": gap}


def _schedules(refs: dict[tuple[str, str, str], _Reference]) -> list[ScheduleCheck]:
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


def _pairs(refs: dict[tuple[str, str, str], _Reference], arm_pairs: list[tuple[str, str]]) -> list[PairCheck]:
    pairs = []
    missing = _Reference(set(), None, None, ok=False)
    for arm_a, arm_b in arm_pairs:
        for (arm, prompt_id, phase), ref in refs.items():
            if arm != arm_b:
                continue
            base = refs.get((arm_a, prompt_id, phase), missing)
            pairs.append(PairCheck(**_where(base, ref), arm_a=arm_a, arm_b=arm_b, prompt_id=prompt_id, phase=phase))
    return pairs


def _pooled(cells: list[Cell]) -> list[PooledBound]:
    by_arm: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.divergent is not None:
            by_arm.setdefault(cell.arm, []).append(cell)
    return [PooledBound(arm, len(members), **asdict(pooled_bound([c.divergent or 0 for c in members],
                                                                  [c.n for c in members])))
            for arm, members in by_arm.items()]


CAPACITY_FLAGS = ("max-num-seqs", "max_num_seqs")


def capacities(sources: RunPaths | list[RunPaths]) -> dict[str, int | None]:
    """Each arm's max-num-seqs, from the config the arms table recorded (None: not set, the engine's default)."""
    out: dict[str, int | None] = {}
    for paths, label in _labelled(sources):
        for row in read_table(paths, "arms", columns=["arm", "config_json"]).to_pylist():
            engine_args = json.loads(row["config_json"] or "{}").get("engine_args") or {}
            value = next((engine_args[k] for k in CAPACITY_FLAGS if engine_args.get(k) is not None), None)
            out[label + row["arm"]] = int(value) if value is not None else None
    return out


def arms_summary(sources: RunPaths | list[RunPaths]) -> list[ArmSummary]:
    rows = []
    for paths, label in _labelled(sources):
        for arm in read_table(paths, "arms", columns=["arm", "status", "image_ref", "image_id", "error"]).to_pylist():
            rows.append(ArmSummary(**{**arm, "arm": label + arm["arm"]}))
    return rows
