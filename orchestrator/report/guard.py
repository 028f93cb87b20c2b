"""The guard's section of the report: the headline first, then one row per pair, shared caches, knobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.guard.leaves import CONFOUNDED, UNKNOWN, describe_extra, show


def headline(guard: Mapping[str, Any]) -> str:
    declared = guard.get("declared") or {}
    observed = guard.get("observed") or {}
    base = declared.get("baseline") or observed.get("baseline")
    confounded = []
    for p in declared.get("pairs", []):
        if p["verdict"] == CONFOUNDED:
            confounded.append(f"{p['arm']} vs {base} in config: {describe_extra(p)}")
    for p in observed.get("pairs", []):
        if p["verdict"] == CONFOUNDED:
            confounded.append(f"{p['arm']} vs {base} observed: {describe_extra(p)}")
    if confounded:
        return "**CONFOUNDED**: " + "; ".join(confounded)
    if not declared.get("checked"):
        return ("Single-variable check: not declared (set study.variables to check that each arm changes "
                "one thing)")
    unknown = [f"{p['arm']}: {', '.join(p['unknown'])}" for p in observed.get("pairs", []) if p["verdict"] == UNKNOWN]
    if unknown:
        return "Single-variable in config; observed check incomplete (unknown): " + "; ".join(unknown)
    arms = ", ".join(f"{p['arm']} changes {', '.join(p['declared']) or 'nothing'}" for p in declared["pairs"])
    where = "in config and observed" if observed else "in config (not yet observed)"
    return f"Single-variable {where}: against {base}, {arms}"


def markdown_section(guard: Mapping[str, Any]) -> list[str]:
    """Report lines for guard.json: the headline first, then one row per pair, shared caches, knobs."""
    lines = [headline(guard), ""]
    declared = guard.get("declared") or {}
    observed = {p["arm"]: p for p in (guard.get("observed") or {}).get("pairs", [])}
    if declared.get("pairs"):
        lines += ["| arm | declared variable | config check | observed check |", "| --- | --- | --- | --- |"]
        for p in declared["pairs"]:
            config_cell = p["verdict"] + (f": {describe_extra(p)}" if p["extra"] else "")
            obs = observed.get(p["arm"])
            if obs is None:
                obs_cell = "not run"
            else:
                obs_cell = obs["verdict"] + (f": {describe_extra(obs)}" if obs["extra"] else "")
                if obs["unknown"]:
                    obs_cell += f" (unknown: {', '.join(obs['unknown'])})"
            lines.append(f"| {p['arm']} | {', '.join(p['declared'] or []) or '-'} | {config_cell} | {obs_cell} |")
        lines.append("")
    for cache in declared.get("shared_caches", []):
        if cache["flagged"]:
            what = ", ".join(f"{leaf} ({', '.join(f'{a}={show(v)}' for a, v in values.items())})"
                             for leaf, values in cache["differing"].items())
            lines.append(f"- **Shared cache flagged**: {cache['dir']} is shared by {', '.join(cache['arms'])}, "
                         f"which differ in {what}: one arm may load the other's entry.")
        else:
            lines.append(f"- Shared cache {cache['dir']} ({', '.join(cache['arms'])}): the arms agree on every "
                         "cache leaf.")
    for arm, knobs in (guard.get("knobs") or {}).items():
        if not knobs.get("checked"):
            lines.append(f"- Knobs of {arm}: not checked ({knobs.get('reason')})")
        elif knobs.get("unknown"):
            lines.append(f"- Knobs of {arm}: **unknown to the engine**: {'; '.join(knobs['unknown'])}")
    return lines
