"""Held facts: startup-log facts (`study.held_facts`, names of the engine profiles' `log_patterns`) that must be equal
in every arm, whatever the arms declare. A declared `image` implies that everything inside it may differ, so
without them the observed check cannot catch what the seed's image A/B had to rule out by hand: another
MoE or attention backend, speculative decoding switched on, another autotune key. A held fact that differs
is an undeclared second variable; one that a log does not state is not observed (unknown), never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.config.catalog import line
from orchestrator.engines import ENGINES

if TYPE_CHECKING:
    from orchestrator.config.schema import Config

PREFIX = "log_facts."
# Every fact some engine reads from its log: a study may hold any of them.
LOG_FACTS = frozenset(name for engine in ENGINES.values() for name in engine.log_patterns)


def problems(config: Config) -> list[str]:
    """One line per held fact no log pattern reads (exit 2, nothing started)."""
    return [line("unknown-name", "study.held_facts", name, sorted(LOG_FACTS),
                 "hold one of the log facts listed (the engine profiles' log_patterns, orchestrator/engines/)")
            for name in config.study.held_facts if name not in LOG_FACTS]


def is_held(field: str, held: list[str]) -> bool:
    return field.startswith(PREFIX) and field[len(PREFIX):] in held


def check(held: list[str], facts: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, list[Any]], list[str]]:
    """`facts`: arm -> its log facts, the baseline first. Returns the held fields that differ (field ->
    [baseline value, arm value]) and the held fields some log does not state, worded for `unknown`."""
    differing: dict[str, list[Any]] = {}
    unknown: list[str] = []
    for name in held:
        values = {arm: arm_facts.get(name) for arm, arm_facts in facts.items()}
        missing = [arm for arm, value in values.items() if value is None]
        if missing:
            unknown.append(f"{PREFIX}{name} (held; not observed in the log of {', '.join(missing)})")
        elif len({str(value) for value in values.values()}) > 1:
            differing[f"{PREFIX}{name}"] = list(values.values())
    return differing, unknown
