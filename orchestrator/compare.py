"""Comparison built from the record alone (Parquet), so a report can be re-made without a server.

Cells are (arm, prompt_id, phase) over warm requests; the cold first request of each arm is compared
with the warm requests of its cell apart. Pairs compare every arm with the baseline, per cell.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from orchestrator.paths import RunPaths
from orchestrator.stats import divergence_bound
from orchestrator.store import read_table

_COLUMNS = ["arm", "prompt_id", "phase", "cold", "error", "sig_text", "sig_top_logprobs"]


@dataclass
class Cell:
    arm: str
    prompt_id: str
    phase: str
    n: int  # warm requests that got a parsable answer
    errors: int
    distinct_completions: int
    distinct_signatures: int | None  # None: the server returned no top logprobs
    divergent: int | None  # requests whose signature differs from the cell's most common one
    upper_bound_95: float | None
    signature_note: str = ""


@dataclass
class ColdCheck:
    arm: str
    prompt_id: str
    phase: str
    matches_warm: bool | None  # None: nothing to compare


@dataclass
class Pair:
    arm_a: str
    arm_b: str
    prompt_id: str
    phase: str
    verdict: str  # identical | differ | not comparable


@dataclass
class ScheduleCheck:
    arm: str
    prompt_id: str
    phase_a: str
    phase_b: str
    verdict: str  # identical | differ | not comparable


def _verdict(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> str:
    """identical: both sides show one and the same signature; differ: anything else that is comparable."""
    sigs_a = {r["sig_top_logprobs"] for r in rows_a if r["error"] is None}
    sigs_b = {r["sig_top_logprobs"] for r in rows_b if r["error"] is None}
    if not sigs_a or not sigs_b or None in sigs_a | sigs_b:
        return "not comparable"
    return "identical" if sigs_a == sigs_b and len(sigs_a) == 1 else "differ"


def compare(paths: RunPaths, baseline: str | None = None) -> dict[str, Any]:
    rows = read_table(paths, "responses", columns=_COLUMNS).to_pylist()
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    cold_rows = []
    for row in rows:
        if row["cold"]:
            cold_rows.append(row)
        else:
            groups.setdefault((row["arm"], row["prompt_id"], row["phase"]), []).append(row)
    cells = [_cell(key, members) for key, members in groups.items()]
    arms = list(dict.fromkeys(row["arm"] for row in rows))
    return {
        "cells": [asdict(c) for c in cells],
        "cold": [asdict(_cold(row, groups.get((row["arm"], row["prompt_id"], row["phase"]), [])))
                 for row in cold_rows],
        "schedules": [asdict(s) for s in _schedules(groups)],
        "pairs": [asdict(p) for p in _pairs(groups, arms, baseline or (arms[0] if arms else None))],
    }


def _schedules(groups: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[ScheduleCheck]:
    """Within an arm and prompt, each phase against every later one (e.g. sequential vs concurrent)."""
    phases: dict[tuple[str, str], list[str]] = {}
    for arm, prompt_id, phase in groups:
        phases.setdefault((arm, prompt_id), []).append(phase)
    checks = []
    for (arm, prompt_id), names in phases.items():
        for i, phase_a in enumerate(names):
            for phase_b in names[i + 1:]:
                checks.append(ScheduleCheck(arm, prompt_id, phase_a, phase_b, _verdict(
                    groups[(arm, prompt_id, phase_a)], groups[(arm, prompt_id, phase_b)])))
    return checks


def _cell(key: tuple[str, str, str], members: list[dict[str, Any]]) -> Cell:
    ok = [r for r in members if r["error"] is None]
    signatures = [r["sig_top_logprobs"] for r in ok]
    note = ""
    if ok and any(s is None for s in signatures):
        distinct_sigs = divergent = None
        bound = None
        note = "no top logprobs returned: signature comparison not possible"
    elif ok:
        counts = Counter(signatures)
        distinct_sigs = len(counts)
        divergent = len(ok) - counts.most_common(1)[0][1]
        bound = divergence_bound(divergent, len(ok))[1]
    else:
        distinct_sigs = divergent = None
        bound = None
        note = "no successful responses"
    return Cell(arm=key[0], prompt_id=key[1], phase=key[2], n=len(ok), errors=len(members) - len(ok),
                distinct_completions=len({r["sig_text"] for r in ok}), distinct_signatures=distinct_sigs,
                divergent=divergent, upper_bound_95=bound, signature_note=note)


def _cold(row: dict[str, Any], warm: list[dict[str, Any]]) -> ColdCheck:
    warm_sigs = {r["sig_top_logprobs"] or r["sig_text"] for r in warm if r["error"] is None}
    own = row["sig_top_logprobs"] or row["sig_text"]
    matches = None if row["error"] is not None or not warm_sigs or own is None else own in warm_sigs
    return ColdCheck(arm=row["arm"], prompt_id=row["prompt_id"], phase=row["phase"], matches_warm=matches)


def _pairs(groups: dict[tuple[str, str, str], list[dict[str, Any]]], arms: list[str],
           baseline: str | None) -> list[Pair]:
    pairs = []
    for arm in arms:
        if arm == baseline or baseline is None:
            continue
        for (arm_b, prompt_id, phase), members in groups.items():
            if arm_b != arm:
                continue
            verdict = _verdict(groups.get((baseline, prompt_id, phase), []), members)
            pairs.append(Pair(baseline, arm, prompt_id, phase, verdict))
    return pairs


def arms_summary(paths: RunPaths) -> list[dict[str, Any]]:
    table: pa.Table = read_table(paths, "arms", columns=["arm", "status", "image_ref", "image_id", "error"])
    return table.to_pylist()
