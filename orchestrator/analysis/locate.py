"""`orchestrator locate RUN --cell ARM/PROMPT/PHASE`: which module of the served model first computed something
different for the same request, from the digests a hooked engine recorded (the `digests` table).

The pair: the cell's two branches as the explorer has them (representatives of its two most common signatures,
each the first request of its branch with digests); where the cell has one signature (or `against` names a
phase), a request of the cell (the one with digests that ran in the largest batch) against one of the same arm
and prompt in another phase (`against`; else, for a cell that ran beside others, the first sequential phase, and
for a sequential cell the first phase that is not). Their digests are walked in call order
(analysis/locate_walk.py) to the first difference; there the margin at the first flipped token and the op probe
at the module's shapes (analysis/locate_probe.py). The explorer's cells and the report's "Where inside the model"
get the same result (`attach`: `Explored.inside`, `Comparison.inside`).
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any, NoReturn

from orchestrator.analysis import locate_read
from orchestrator.analysis.locate_probe import not_applicable, probe_ask
from orchestrator.analysis.locate_results import KERNEL, CellInside, Difference, Located, Margin, Side, TopTwo
from orchestrator.analysis.locate_walk import by_step, walk
from orchestrator.analysis.results import SIGNATURE_BASES, Explored
from orchestrator.engines import ENGINES, profile_for
from orchestrator.errors import ConfigError, RecordError, did_you_mean
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, RecordedRun, read_run


def locate(source: RecordedRun | RunPaths, label: str, against: str | None = None) -> Located:
    """One cell's pair, walked, of a run (a run dir: read once here); bad input (no such cell, no digests) is one
    RecordError or ConfigError line."""
    run = source if isinstance(source, RecordedRun) else read_run(source)
    arm, prompt_id, phase = _split(label)
    rows = locate_read.answers(run, arm, prompt_id)
    if not rows:
        _unknown(run, label, arm, prompt_id)
    return _located(run, label, _pair(run, rows, phase, against, locate_read.digested(run)))


def attach(explored: list[Explored], recorded: Recorded) -> list[CellInside]:
    """A run with digests: each explored cell gets its `inside`, and every cell that ran beside others (not
    sequential) with digests its answer line against its default pair (the report's "Where inside the model")."""
    if len(recorded.runs) != 1 or not locate_read.has_digests(recorded.runs[0]):
        return []
    run = recorded.runs[0]
    have = locate_read.digested(run)
    by_prompt: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in locate_read.answers(run):
        by_prompt.setdefault((row["arm"], row["prompt_id"]), []).append(row)
    cells = {(r["arm"], r["prompt_id"], r["phase"]): r["phase_kind"] for rows in by_prompt.values() for r in rows
             if _key(r) in have}
    found: dict[str, Located | str] = {}

    def answer(arm: str, prompt_id: str, phase: str) -> Located | str:
        label = f"{arm}/{prompt_id}/{phase}"
        rows = by_prompt.get((arm, prompt_id))
        if label not in found and not rows:
            found[label] = "no measured answer without an error"
        if label not in found:
            try:
                found[label] = _located(run, label, _pair(run, rows or [], phase, None, have))
            except (RecordError, ConfigError) as exc:
                found[label] = str(exc)
        return found[label]

    for cell in explored:
        got = answer(cell.arm, cell.prompt_id, cell.phase)
        cell.inside = got if isinstance(got, Located) else None  # a pair without digests: no section
    out = []
    for (arm, prompt_id, phase), kind in cells.items():
        if kind != "sequential":
            got, label = answer(arm, prompt_id, phase), f"{arm}/{prompt_id}/{phase}"
            command = shlex.join(["orchestrator", "locate", str(run.paths.root), "--cell", label])
            out.append(CellInside(label, command,
                                  got if isinstance(got, Located) else None, got if isinstance(got, str) else None))
    return out


def _split(label: str) -> tuple[str, str, str]:
    parts = label.split("/")
    if len(parts) != 3 or not all(parts):
        raise ConfigError(f"--cell {label!r}: give ARM/PROMPT/PHASE (`orchestrator show RUN` lists the cells)")
    return parts[0], parts[1], parts[2]


def _unknown(run: RecordedRun, label: str, arm: str, prompt_id: str) -> NoReturn:
    """No answers of ARM/PROMPT: the closest arm, prompt or cell the run has."""
    rows = locate_read.answers(run)
    arms, prompts = {r["arm"] for r in rows}, {r["prompt_id"] for r in rows}
    name, value, names = ("arm", arm, arms) if arm not in arms else ("prompt", prompt_id, prompts) \
        if prompt_id not in prompts else ("cell", label, {f"{r['arm']}/{r['prompt_id']}/{r['phase']}" for r in rows})
    raise ConfigError(f"--cell {label}: no {name} {value!r} with answers in {run.paths.root}."
                      f"{did_you_mean(value, names)}")


_Pair = tuple[str, Side, Side, dict[str, int]]  # words, the two sides, request id -> attempt


def _pair(run: RecordedRun, rows: list[dict[str, Any]], phase: str, against: str | None,
          have: dict[tuple[str, int], int]) -> _Pair:
    """`rows`: the measured answers of the cell's arm and prompt, every phase."""
    arm, prompt_id = rows[0]["arm"], rows[0]["prompt_id"]
    label = f"{arm}/{prompt_id}/{phase}"
    cell = [r for r in rows if r["phase"] == phase]
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    if not cell:
        raise ConfigError(f"--cell {label}: no such cell with answers in {run.paths.root}."
                          f"{did_you_mean(phase, phases)}")
    basis = _basis(cell)
    counts = Counter(_signature(r, basis) for r in cell)
    if against is None and len(counts) > 1:
        (first, n_first), (second, n_second) = counts.most_common(2)
        sides = [_side(_first(cell, basis, sig, have), basis, n) for sig, n in ((first, n_first), (second, n_second))]
        if all(sides):
            a, b = sides[0], sides[1]
            assert a is not None and b is not None
            return (f"the cell's two most common branches ({n_first} and {n_second} of {len(cell)} requests)", a, b,
                    {a.request_id: _attempt(cell, a.request_id), b.request_id: _attempt(cell, b.request_id)})
        _no_digests(run, label)
    mine = [r for r in cell if _key(r) in have]
    if not mine:
        _no_digests(run, label)
    chosen = max(mine, key=lambda r: have[_key(r)])  # the first of the largest prefill batch
    others = [p for p in phases if p != phase]
    sequential = cell[0]["phase_kind"] == "sequential"
    kinds = {r["phase"]: r["phase_kind"] for r in rows}
    other_phase = against or next((p for p in others if (kinds[p] == "sequential") != sequential), None)
    if other_phase is None:
        which = "non-sequential" if sequential else "sequential"
        raise ConfigError(f"cell {label} has one signature and {arm}/{prompt_id} ran in no {which} phase to compare "
                          f"it against: pass --against PHASE ({_valid(others)})")
    theirs = [r for r in rows if r["phase"] == other_phase and r is not chosen]
    if not theirs:
        raise ConfigError(f"--against {other_phase}: {arm}/{prompt_id} has no answers in phase {other_phase} "
                          f"({_valid(others)})")
    digested = [r for r in theirs if _key(r) in have]
    if not digested:
        _no_digests(run, f"{arm}/{prompt_id}/{other_phase}")
    other = max(digested, key=lambda r: have[_key(r)])
    their_basis = _basis([r for r in rows if r["phase"] == other_phase])
    a = Side(**_where(chosen, basis), requests=counts[_signature(chosen, basis)])
    b = Side(**_where(other, their_basis), requests=sum(_signature(r, their_basis) == _signature(other, their_basis)
                                                         for r in rows if r["phase"] == other_phase))
    why = "--against" if against else f"one signature, so the first {'non-' if sequential else ''}sequential phase"
    words = (f"a request of the cell (batch of {have[_key(chosen)]} in its prefill) against one of phase "
             f"{other_phase} ({other['phase_kind']}, batch of {have[_key(other)]} in its prefill); {why}")
    return words, a, b, {a.request_id: _attempt(rows, a.request_id), b.request_id: _attempt(rows, b.request_id)}


def _valid(phases: list[str]) -> str:
    return f"phases it can take: {', '.join(phases)}" if phases else "the arm and prompt ran in no other phase"


def _basis(cell: list[dict[str, Any]]) -> str | None:
    """The signature column every request of the cell has (None: not signed)."""
    return next((c for c in SIGNATURE_BASES.values() if all(r[c] is not None for r in cell)), None)


def _signature(row: dict[str, Any], basis: str | None) -> str | None:
    return row[basis] if basis else None


def _key(row: dict[str, Any]) -> tuple[str, int]:
    return row["request_id"], row["attempt"] or 0


def _attempt(rows: list[dict[str, Any]], request_id: str) -> int:
    return next(r["attempt"] or 0 for r in rows if r["request_id"] == request_id)


def _first(cell: list[dict[str, Any]], basis: str | None, signature: str | None,
           have: dict[tuple[str, int], int]) -> dict[str, Any] | None:
    return next((r for r in cell if _signature(r, basis) == signature and _key(r) in have), None)


def _where(row: dict[str, Any], basis: str | None) -> dict[str, Any]:
    return {"request_id": row["request_id"], "phase": row["phase"], "phase_kind": row["phase_kind"] or "",
            "signature": _signature(row, basis)}


def _side(row: dict[str, Any] | None, basis: str | None, requests: int) -> Side | None:
    return None if row is None else Side(**_where(row, basis), requests=requests)


def _no_digests(run: RecordedRun, label: str) -> NoReturn:
    engines = ", ".join(f"`engine: {name}`" for name, p in ENGINES.items() if p.capabilities.digests) or \
        "an engine whose profile has capabilities.digests"
    raise RecordError(f"{run.paths.root} has no digests for cell {label}: run it again with "
                      f"protocol.request.digests=true on an arm with {engines}")


def _located(run: RecordedRun, label: str, pair: _Pair) -> Located:
    words, a, b, attempts = pair
    rows = locate_read.digest_rows(run, attempts)
    steps = {side.request_id: by_step(rows[side.request_id]) for side in (a, b)}
    for side in (a, b):
        mine = rows[side.request_id]
        side.engine_request_id = mine[0]["engine_request_id"] if mine else None
        side.steps, side.calls = len(steps[side.request_id]), len(mine)
    found = walk(steps[a.request_id], steps[b.request_id])
    located = Located(label, words, a, b, found.steps_compared, found.calls_compared, found.realigned_steps,
                      found.one_sided_calls, found.one_sided_steps, found.mixed_calls, found.difference)
    located.margin = margin(locate_read.tokens(run, attempts), a.request_id, b.request_id)
    if found.difference is not None:
        located.look_inside = _look_inside(run, label.split("/")[0], found.difference, rows)
        located.no_probe = not_applicable(found.difference)
    if found.difference is not None and located.no_probe is None:
        device = locate_read.device_and_dtype(run, label.split("/")[0])
        located.probe = probe_ask(found.difference, steps[a.request_id][found.difference.step],
                                  label.split("/")[0], str(run.paths.root), device)
    return located


def _look_inside(run: RecordedRun, arm: str, diff: Difference, rows: dict[str, list[dict[str, Any]]]) -> str | None:
    """An arm whose engine digested modules down to a depth only (its scope flags), split at a module of that depth
    with no call recorded inside it: the overrides of a run that digests that module and those inside it."""
    start = next((s for s in run.arms if s.arm == arm), None)
    if start is None or diff.kind != KERNEL or (scope := profile_for(start.engine).digest_scope_flags) is None:
        return None
    depth_flag, under_flag = scope
    depth = (start.config.get("engine_args") or {}).get(depth_flag)
    if not isinstance(depth, int) or depth < 1 or diff.module.count(".") + 1 < depth:
        return None
    if any(r["module"].startswith(f"{diff.module}.") for side in rows.values() for r in side):
        return None
    return f"++arms.{arm}.engine_args.{depth_flag}=0 ++arms.{arm}.engine_args.{under_flag}={diff.module}"


def margin(answers: dict[str, dict[str, Any]], a: str, b: str) -> Margin | None:
    """At the first position where the two answers' token ids differ (None: they never do)."""
    if a not in answers or b not in answers:
        return None
    ids_a, ids_b = answers[a]["token_ids"] or [], answers[b]["token_ids"] or []
    position = next((i for i, (p, q) in enumerate(zip(ids_a, ids_b, strict=False)) if p != q), None)
    if position is None:
        return None
    return Margin(position, *(_top_two(answers[r], position) for r in (a, b)))


def _top_two(answer: dict[str, Any], position: int) -> TopTwo:
    tops, gaps = answer["top_logprobs"] or [], answer["top_gaps"] or []
    entries = tops[position] if position < len(tops) and tops[position] else []
    top = [(str(e["token"]), float(e["logprob"])) for e in entries[:2]]
    gap = gaps[position] if position < len(gaps) else None
    return TopTwo(int(answer["token_ids"][position]), top, gap)
