"""Arm configs as leaves (dotted paths to values), their differences, and how a difference is said."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

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
    return {k: v for k, v in flatten(arm).items() if not any(matches(k, p) for p in ignore)}


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
