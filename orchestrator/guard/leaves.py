"""Arm configs as leaves (dotted paths to values), their differences, and how a difference is said."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.engines import DEFAULT_ENGINE, ENGINES
from orchestrator.guard.results import ABSENT, PairDifference

if TYPE_CHECKING:
    from orchestrator.config.schema import ArmConfig



def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'engine_args': {'seed': 0}, 'env': {}} -> {'engine_args.seed': 0}. Lists are one leaf."""
    if is_dataclass(node) and not isinstance(node, type):
        node = asdict(node)
    if isinstance(node, Mapping):
        leaves: dict[str, Any] = {}
        for key, value in node.items():
            leaves.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return leaves
    if hasattr(node, "value") and not isinstance(node, str | int | float | bool):  # enums
        node = node.value
    return {prefix: node}


def matches(path: str, pattern: str) -> bool:
    """A pattern names a leaf or everything under a prefix; '*' names everything."""
    return pattern == "*" or path == pattern or path.startswith(pattern + ".")


def arm_leaves(arm: ArmConfig | Mapping[str, Any], ignore: list[str]) -> dict[str, Any]:
    """The arm's leaves, a negated switch as its switch set false (`positive`): engine_args.no-X: true is
    engine_args.X: false, the same flag, so arms that write it either way compare by what they run."""
    leaves = flatten(arm)
    engine = arm.get("engine") if isinstance(arm, Mapping) else arm.engine
    for leaf, value in list(leaves.items()):
        named = positive(leaf, engine)
        if named != leaf and value is True and named not in leaves:
            del leaves[leaf]
            leaves[named] = False
    return {k: v for k, v in leaves.items() if not any(matches(k, p) for p in ignore)}


def positive(leaf: str, engine: str | None) -> str:
    """A leaf as the switch it sets, where the engine's profile renders that switch off as the leaf's flag:
    engine_args.no-batch-invariant -> engine_args.batch-invariant. Other leaves as they are."""
    group, _, name = leaf.partition(".")
    profile = ENGINES.get(engine or DEFAULT_ENGINE)  # an unknown engine is validate.py's to report
    switch = profile.switch_of(name) if group == "engine_args" and profile else None
    return f"{group}.{switch}" if switch else leaf


def positive_keys(table: Mapping[str, list[str]], engine: str | None) -> dict[str, list[str]]:
    """A leaf -> fields table (study.implications) keyed by `positive` leaves, entries of the same switch merged."""
    merged: dict[str, list[str]] = {}
    for leaf, fields in table.items():
        merged.setdefault(positive(leaf, engine), []).extend(fields)
    return merged


def differences(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Leaf -> [baseline value, arm value] for every leaf that differs (ABSENT where one lacks it)."""
    return {key: [base.get(key, ABSENT), other.get(key, ABSENT)]
            for key in sorted(set(base) | set(other)) if base.get(key, ABSENT) != other.get(key, ABSENT)}


def show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def describe_extra(pair: PairDifference) -> str:
    """'engine_args.moe-backend (<absent> -> flashinfer_cutlass), ...'"""
    return ", ".join(f"{leaf} ({show(pair.differing[leaf][0])} -> {show(pair.differing[leaf][1])})"
                     for leaf in pair.extra)


def describe_all(pair: PairDifference) -> str:
    """Every differing leaf, each marked declared or NOT declared."""
    return ", ".join(f"{leaf} ({show(old)} -> {show(new)}) "
                     f"[{'NOT declared' if leaf in pair.extra else 'declared'}]"
                     for leaf, (old, new) in pair.differing.items())
