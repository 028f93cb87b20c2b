"""A step's module calls as the hooks took them, and the plan that takes every target's rows of all of them at
once: the tensors of like shape, dtype and rows stacked, one block each (a few device ops a step, not a copy a
call), and each call's fields and digest slots. A forward's steps repeat the same calls (a decode step's are the
same at every step), so a plan is made once and used again while the step's calls match it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hookedengine.rows import Select, StepLayout, Target, place, take

Slot = tuple[int, int] | None  # (block, row) of a digest; None: none (no input of its own, or rows overwritten)


class Taken:
    """One module call as its hook saw it: the tensors (kept until the step ends, with their version counters),
    the earlier call whose unchanged output is its input, and (`copies`, by request) its targets' rows copied
    as it returned, for a module whose tensors a later in-place kernel may overwrite."""

    __slots__ = ("copies", "earlier", "kind", "name", "x", "x_version", "y", "y_version")

    def __init__(self, name: str, kind: str, x: torch.Tensor | None, y: torch.Tensor) -> None:
        self.name, self.kind, self.x, self.y = name, kind, x, y
        self.x_version = x._version if x is not None else 0
        self.y_version = y._version
        self.earlier: int | None = None  # set when the step ends (`resolve`)
        self.copies: dict[str, tuple[torch.Tensor | None, torch.Tensor]] | None = None

    def copy(self, layout: StepLayout, targets: dict[str, Target]) -> None:
        self.copies = {}
        for rid, tgt in targets.items():
            x_select = input_select(self, layout, tgt)
            x_rows = take(self.x, x_select).clone() if x_select is not None and self.x is not None else None
            self.copies[rid] = (x_rows, take(self.y, place(self.y.shape, layout, tgt)[0]).clone())


def input_select(t: Taken, layout: StepLayout, tgt: Target) -> Select | None:
    """How to take a call's input rows where its input needs a digest of its own (not an earlier call's output,
    and the target's own rows), else None."""
    if t.x is None or t.earlier is not None:
        return None
    select, start, _stop, _total = place(t.x.shape, layout, tgt)
    return select if start is not None else None


def resolve(taken: list[Taken]) -> tuple[set[str], list[Any]]:
    """When the step ends, in one pass over its calls: each call's `earlier` (the earlier call whose output is its
    input, unchanged between the two calls, by the versions the hooks saw), the modules whose tensors changed
    after they returned, and what a plan depends on, call by call (its signature)."""
    outputs: dict[int, tuple[torch.Tensor, int, int]] = {}  # the latest call's output by tensor identity
    changed: set[str] = set()
    sig: list[Any] = []
    for i, t in enumerate(taken):
        x, y = t.x, t.y
        if x is not None:
            before = outputs.get(id(x))
            if before is not None and before[0] is x and before[1] == t.x_version:
                t.earlier = before[2]
            if x._version != t.x_version:
                changed.add(t.name)
            sig.append((t.name, y.shape, y.dtype, x.shape, x.dtype, t.earlier, t.copies is None))
        else:
            sig.append((t.name, y.shape, y.dtype, None, None, None, t.copies is None))
        if y._version != t.y_version:
            changed.add(t.name)
        outputs[id(y)] = (y, t.y_version, i)
    return changed, sig


@dataclass
class Plan:
    """Block by block: the stacks (select, [(call, 0 its output | 1 its input)]), then the copies (call, target,
    0 | 1); and call by call for each target (target, the call's fields but its step, output slot, input slot)."""

    signature: list[Any]
    stacks: list[tuple[Select, list[tuple[int, int]]]]
    copies: list[tuple[int, int, int]]
    calls: list[tuple[int, list[Any], Slot, Slot]]

    def blocks(self, taken: list[Taken], rids: list[str]) -> list[torch.Tensor]:
        """The step's blocks, [k, m] each, on the device."""
        out: list[torch.Tensor] = []
        for select, members in self.stacks:
            stack = torch.stack([taken[c].y if w == 0 else taken[c].x for c, w in members])  # type: ignore[misc]
            out.append(take(stack, select, stacked=True).reshape(len(members), -1))
        for call, target, which in self.copies:
            copies = taken[call].copies
            assert copies is not None
            out.append(copies[rids[target]][which].reshape(1, -1))  # type: ignore[union-attr]
        return out


def make_plan(taken: list[Taken], layout: StepLayout, targets: list[Target], lost: set[str],
              sig: list[Any]) -> Plan:
    """The plan of a step's calls for its targets (`lost`: modules whose rows were overwritten: no digests)."""
    groups: dict[tuple[Any, ...], list[tuple[int, int, dict[str, Any]]]] = {}
    copied: list[tuple[int, int, int, dict[str, Any]]] = []
    entries: list[tuple[int, list[Any], dict[str, Any]]] = []
    for target, tgt in enumerate(targets):
        mine: list[tuple[dict[str, Any], int | None]] = []
        for call, t in enumerate(taken):
            select, start, stop, total = place(t.y.shape, layout, tgt)
            fields = [call, t.name, t.kind, start, stop, total, tuple(t.x.shape) if t.x is not None else None,
                      tuple(t.y.shape)]
            slots: dict[str, Any] = {}
            x_select = input_select(t, layout, tgt)
            if t.copies is not None:
                copied.append((call, target, 1, slots))  # the output's (copies hold (input, output))
                if x_select is not None:
                    copied.append((call, target, 0, slots))
            elif t.name not in lost:
                groups.setdefault((t.y.shape, t.y.dtype, select), []).append((call, 0, slots))
                if x_select is not None and t.x is not None:
                    groups.setdefault((t.x.shape, t.x.dtype, x_select), []).append((call, 1, slots))
            if t.earlier is not None:  # its input digest is that call's output's, unless those rows are the batch's
                before, before_start = mine[t.earlier]
                slots["in_from"] = before if before_start is not None else None
            mine.append((slots, start))
            entries.append((target, fields, slots))
    stacks: list[tuple[Select, list[tuple[int, int]]]] = []
    for (_shape, _dtype, select), members in groups.items():
        for row, (_call, which, slots) in enumerate(members):
            slots["out" if which == 0 else "in"] = (len(stacks), row)
        stacks.append((select, [(c, w) for c, w, _s in members]))
    copies = []
    for block, (call, target, which, slots) in enumerate(copied, start=len(stacks)):
        slots["out" if which == 1 else "in"] = (block, 0)
        copies.append((call, target, which))
    calls = [(target, fields, slots.get("out"), _input_slot(slots)) for target, fields, slots in entries]
    return Plan(sig, stacks, copies, calls)


def _input_slot(slots: dict[str, Any]) -> Slot:
    if "in_from" in slots:
        before = slots["in_from"]
        return None if before is None else before.get("out")
    return slots.get("in")
