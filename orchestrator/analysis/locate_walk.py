"""The walk of `locate`: two requests' digests in (step, call) order, to the first call where the same request's
rows differ. A step whose module sequence is the same on both sides is compared call by call; one whose sequence
differs (another kernel, another split) is aligned by (module, occurrence in the step), and the walk says so.

At each call the input hash is compared first, then the output hash: input equal and output different is the
module's own computation (its kernel split); input different while every earlier output was equal is computation
between modules (code of the parent module that is no module itself, e.g. eager attention between v_proj and
o_proj).

A call whose rows mix the batch's requests (the engine gives it no rows of the request's own: MoE experts'
inputs, grouped by expert) on either side is skipped and counted: it holds other requests' tokens, or another
number of them. A call whose input is such a call's output is compared on its output only."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.locate_results import BETWEEN, KERNEL, Call, Difference

Row = dict[str, Any]  # one digest row (record/tables.py DIGESTS)


@dataclass
class Walk:
    steps_compared: int = 0
    calls_compared: int = 0
    realigned_steps: list[int] = field(default_factory=list)
    one_sided_calls: int = 0
    one_sided_steps: int = 0
    mixed_calls: int = 0
    difference: Difference | None = None


def by_step(rows: list[Row]) -> dict[int, list[Row]]:
    """A request's digest rows per step, each step's in call order."""
    steps: dict[int, list[Row]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["step"], r["call"])):
        steps[int(row["step"])].append(row)
    return dict(steps)


def walk(a: dict[int, list[Row]], b: dict[int, list[Row]]) -> Walk:
    """To the first difference (or through every step both sides have)."""
    out = Walk(one_sided_steps=len(set(a) ^ set(b)))
    for step in sorted(set(a) & set(b)):
        pairs = _pairs(a[step], b[step], out, step)
        out.steps_compared += 1
        before: Row | None = None
        for x, y in pairs:
            if x["rows_start"] is None or y["rows_start"] is None:
                out.mixed_calls += 1
                continue
            out.calls_compared += 1
            inputs_differ = x["in_hash"] is not None and y["in_hash"] is not None and x["in_hash"] != y["in_hash"]
            if inputs_differ or x["out_hash"] != y["out_hash"]:
                out.difference = difference(step, x, y, before, inputs_differ)
                return out
            before = x
    return out


def _pairs(a: list[Row], b: list[Row], out: Walk, step: int) -> list[tuple[Row, Row]]:
    if [r["module"] for r in a] == [r["module"] for r in b]:
        return list(zip(a, b, strict=True))
    out.realigned_steps.append(step)
    others = {key: row for key, row in _keyed(b)}
    pairs = [(row, others.pop(key)) for key, row in _keyed(a) if key in others]
    out.one_sided_calls += len(a) + len(b) - 2 * len(pairs)
    return pairs


def _keyed(rows: list[Row]) -> list[tuple[tuple[str, int], Row]]:
    """(module, its occurrence in the step) per call: a module called twice in a step is two calls."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for row in rows:
        out.append(((row["module"], seen[row["module"]]), row))
        seen[row["module"]] += 1
    return out


def difference(step: int, x: Row, y: Row, before: Row | None, inputs_differ: bool) -> Difference:
    parent = None
    if inputs_differ:
        parent = _common_parent(before["module"], x["module"]) if before is not None else None
    heads = [abs(p - q) for p, q in zip(x["out_head"] or [], y["out_head"] or [], strict=False)]
    return Difference(
        kind=BETWEEN if inputs_differ else KERNEL, step=step, module=x["module"], module_type=x["module_type"],
        a=_call(x), b=_call(y), max_abs_diff=max(heads) if heads else None,
        rel_sum=_relative(x["out_sum"], y["out_sum"]), rel_norm=_relative(x["out_norm"], y["out_norm"]),
        rel_absmax=_relative(x["out_absmax"], y["out_absmax"]),
        input_recorded=x["in_hash"] is not None and y["in_hash"] is not None,
        parent=parent, before=before["module"] if inputs_differ and before is not None else None)


def _call(row: Row) -> Call:
    return Call(int(row["call"]), row["module"], row["module_type"], int(row["rows_total"]),
                list(row["in_shape"] or []), list(row["out_shape"] or []), int(row["batch_size"]),
                int(row["context_tokens"]), int(row["rows_stop"] or 0) - int(row["rows_start"] or 0))


def _relative(p: float | None, q: float | None) -> float | None:
    if p is None or q is None:
        return None
    scale = max(abs(p), abs(q))
    return abs(p - q) / scale if scale else 0.0


def _common_parent(first: str, second: str) -> str:
    """The deepest module that holds both calls ("" : the model's own forward)."""
    common = []
    for p, q in zip(first.split(".")[:-1], second.split(".")[:-1], strict=False):
        if p != q:
            break
        common.append(p)
    return ".".join(common)
