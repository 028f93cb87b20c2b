"""An engine's determinism switches: the flags and env vars that, on its profile's word, move whether its
answers repeat (batch invariance, a fused finalize with atomics, a non-stable top-k tie-break, a prefix
cache, graph capture, a tuner's cache). `orchestrator triage` tries each one the arm has at a setting other
than the repeatable one as an A/B with everything else pinned (docs/triage.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ABSENT = None  # a switch's value where the arm does not set it


@dataclass(frozen=True)
class Switch:
    """One determinism switch: where it sits in an arm (`engine_args.NAME` or `env.NAME`), the value that
    makes the engine repeatable (None: the key left out), what the engine does when the arm leaves it out,
    and in words the mechanism it controls and what turning it to `repeatable` costs."""

    name: str  # neutral, as the findings name it: batch_invariant, fused_finalize, ...
    key: str  # engine_args.FLAG or env.NAME
    repeatable: Any  # the value under which the mechanism is off (None: the key absent)
    default: Any  # the engine's value where the arm sets nothing
    mechanism: str
    fix_cost: str

    def value(self, arm: dict[str, Any]) -> Any:
        """The switch's value in an arm's config (as a dict): the engine's default where it is absent."""
        section, _, name = self.key.partition(".")
        found = (arm.get(section) or {}).get(name, ABSENT)
        return self.default if found is ABSENT else found

    def is_repeatable(self, arm: dict[str, Any]) -> bool:
        return _same(self.value(arm), self.default if self.repeatable is ABSENT else self.repeatable)

    def set_repeatable(self, arm: dict[str, Any]) -> dict[str, Any]:
        """A copy of the arm with this switch at its repeatable value (the key dropped where that is absent)."""
        section, _, name = self.key.partition(".")
        block = dict(arm.get(section) or {})
        if self.repeatable is ABSENT:
            block.pop(name, None)
        else:
            block[name] = self.repeatable
        return {**arm, section: block}


def _same(a: Any, b: Any) -> bool:
    """Values as a YAML config and an env var spell them: true, "1", "true" and "on" are one."""
    def norm(v: Any) -> str:
        text = str(v).strip().lower()
        return {"true": "1", "on": "1", "yes": "1", "false": "0", "off": "0", "no": "0", "none": ""}.get(text, text)
    return norm(a) == norm(b)
