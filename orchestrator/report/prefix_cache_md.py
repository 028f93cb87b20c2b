"""The report's "Prefix cache" section: per arm, how many measured requests its engine said were served a cached
prefix (analysis/prefix_served.py), and so whether the seed's precondition "prefix cache off" held, as observed."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.analysis.prefix_served import PrefixServed

HELD = {True: "held", False: "**not held**", None: "not observable"}


def section(rows: Sequence[PrefixServed]) -> list[str]:
    if not rows:
        return []
    lines = ["## Prefix cache (as the engine says)", "",
             "Measured requests whose prompt's prefix the engine's prefix cache served, by the engine's own word "
             "(usage.prompt_tokens_details.cached_tokens, the record's `cached_prompt_tokens`). The seed's "
             "precondition \"prefix cache off\" holds where none was; a request served from the cache ran another "
             "prefill path than its prompt's first (docs/reference-engine.md, \"Prefix cache\").", "",
             "| arm | measured | said | served from the cache | most cached tokens | \"prefix cache off\" |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.arm} | {r.measured} | {r.said} | {r.served} | {r.most_cached_tokens} | {HELD[r.off_held]} |"
              for r in rows]
    return [*lines, ""]
