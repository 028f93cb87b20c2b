"""The guard's section of the report: the headline first, then one row per pair, shared caches, knobs."""

from __future__ import annotations

from orchestrator.guard.leaves import describe_extra, show
from orchestrator.guard.results import CONFOUNDED, UNKNOWN, GuardResult, ObservedPair


def headline(guard: GuardResult) -> str:
    declared, observed = guard.declared, guard.observed
    base = declared.baseline if declared else observed.baseline if observed else None
    confounded = [f"{p.arm} vs {base} in config: {describe_extra(p)}"
                  for p in (declared.pairs if declared else []) if p.verdict == CONFOUNDED]
    confounded += [f"{p.arm} vs {base} observed: {describe_extra(p)}"
                   for p in (observed.pairs if observed else []) if p.verdict == CONFOUNDED]
    if confounded:
        return "**CONFOUNDED**: " + "; ".join(confounded)
    if declared is None or not declared.checked:
        return ("Single-variable check: not declared (set study.variables to check that each arm changes "
                "one thing)")
    void = "".join(f". **But {v}**" for v in declared.stand_in_sentences() + declared.coupled_sentences())
    if not declared.pairs:
        return f"Single-variable check: one arm ({base}), nothing to compare it with{void}"
    unknown = [f"{p.arm}: {', '.join(p.unknown)}" for p in (observed.pairs if observed else []) if p.verdict == UNKNOWN]
    if unknown:
        return "Single-variable in config; observed check incomplete (unknown): " + "; ".join(unknown) + void
    arms = ", ".join(f"{p.arm} changes {', '.join(p.declared or []) or 'nothing'}" for p in declared.pairs)
    where = "in config and observed" if observed else "in config (not yet observed)"
    return f"Single-variable {where}: against {base}, {arms}{void}"


def _observed_cell(pair: ObservedPair | None) -> str:
    if pair is None:
        return "not run"
    cell = pair.verdict + (f": {describe_extra(pair)}" if pair.extra else "")
    return cell + (f" (unknown: {', '.join(pair.unknown)})" if pair.unknown else "")


def markdown_section(guard: GuardResult) -> list[str]:
    """Report lines for the guard: the headline first, then one row per pair, shared caches, knobs."""
    lines = [headline(guard), ""]
    declared = guard.declared
    observed = {p.arm: p for p in (guard.observed.pairs if guard.observed else [])}
    if declared and declared.pairs:
        lines += ["| arm | declared variable | config check | observed check |", "| --- | --- | --- | --- |"]
        for p in declared.pairs:
            config_cell = p.verdict + (f": {describe_extra(p)}" if p.extra else "")
            lines.append(f"| {p.arm} | {', '.join(p.declared or []) or '-'} | {config_cell} | "
                         f"{_observed_cell(observed.get(p.arm))} |")
        lines.append("")
    for cache in declared.shared_caches if declared else []:
        if cache.flagged:
            what = ", ".join(f"{leaf} ({', '.join(f'{a}={show(v)}' for a, v in values.items())})"
                             for leaf, values in cache.differing.items())
            lines.append(f"- **Shared cache flagged**: {cache.dir} is shared by {', '.join(cache.arms)}, "
                         f"which differ in {what}: one arm may load the other's entry.")
        else:
            lines.append(f"- Shared cache {cache.dir} ({', '.join(cache.arms)}): the arms agree on every cache leaf.")
    for arm, knobs in guard.knobs.items():
        if not knobs.checked:
            lines.append(f"- Knobs of {arm}: not checked ({knobs.reason})")
        elif knobs.unknown:
            lines.append(f"- Knobs of {arm}: **unknown to the engine**: {'; '.join(knobs.unknown)}")
        if knobs.checked and knobs.listed_from:
            lines.append(f"- Knobs of {arm} checked against {knobs.flags_known} flags and {knobs.env_known} env "
                         f"names listed from {knobs.listed_from}")
    lines += [f"- Known issue{'' if note.affected else ' (not checked)'}: {note.line}" for note in guard.known_issues]
    return lines
