"""The triage's findings, ranked, most likely cause first: a switch whose A/B removed the variation the arm
showed, then one that lowered it, then variation no switch explained, a start failure, a known issue of the arm's
versions; each with its evidence (the cells and rates with bounds, the A/B that separated it), what it rules
out, what the fix costs, and the one command that re-runs its step. Nothing found: "repeatable in everything
tried", with the bound of every request the arm answered."""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.analysis.rates import LOWER, compare_rates
from orchestrator.analysis.stats import divergence_bound
from orchestrator.engines import profile_for
from orchestrator.engines.switches import Switch
from orchestrator.triage.inside import NAME as LOCATE
from orchestrator.triage.state import DONE, FAILED, SKIPPED, StepOutcome, TriageState
from orchestrator.triage.steps import AS_GIVEN, COST

REPEATABLE = "repeatable in everything tried"
# The seed's checks this triage does not run (docs/triage.md, "Not yet"): every page says so
NOT_RUN = ("load points to saturation (the triage runs one, at the engine's batch size: `orchestrator run "
           "study=load_saturation`, docs/load.md)", "op probes at the engine's shapes (`orchestrator probe`)",
           "`orchestrator locate` on a hooked engine")
KNOWN = "known issue"
BUDGET = "the budget"  # how a step skipped for the budget says so (triage/procedure.py)


@dataclass(frozen=True)
class Finding:
    rank: int
    kind: str  # switch (removes, lowers), unexplained, starts, known issue
    cause: str  # what it names: a switch's neutral name, or the variation's kind
    title: str
    evidence: tuple[str, ...]
    rules_out: str
    fix_cost: str
    command: str
    run_dir: str
    score: float  # how strongly the evidence points at it; the ranking's order


@dataclass(frozen=True)
class Findings:
    arm: str
    verdict: str  # the first line of every page
    findings: tuple[Finding, ...]
    steps: tuple[StepOutcome, ...]
    divergent: int  # over every step's cells of the arm as given
    n: int
    upper_95: float
    not_run: tuple[str, ...] = NOT_RUN
    load_cost: tuple[str, ...] = ()  # what the arm as given cost at the triage's load point (its `load` step)


def _rate(k: int, n: int) -> str:
    low, high = divergence_bound(k, n)
    return f"{k} divergent of {n} ({low:.1%}-{high:.1%} at 95 %)"


def where(step: StepOutcome, arm: str = AS_GIVEN) -> list[str]:
    """In words, where an arm varied in a step: its divergent cells, cold against warm, sequential against
    concurrent, across starts."""
    said = [f"{step.name}: {c.prompt} {c.phase}: {c.distinct} distinct in {c.n}, {_rate(c.divergent, c.n)}"
            for c in step.cells if c.arm == arm and c.divergent]
    said += [f"{step.name}: {d.split('/', 1)[1]}: the cold first request differs from the warm repeats"
             for d in step.cold_differs if d.startswith(f"{arm}/")]
    said += [f"{step.name}: {d.split('/', 1)[1]}: sequential and concurrent answers differ"
             for d in step.schedule_differs if d.startswith(f"{arm}/")]
    if arm == AS_GIVEN and step.signatures_across_starts > 1:
        said.append(f"{step.name}: {step.signatures_across_starts} distinct first answers across {step.starts} starts")
    return said


def summary(step: StepOutcome) -> str:
    """A repeatable step in words: what it showed."""
    if step.starts > 1:
        return (f"{step.name}: {step.starts_ready} of {step.starts} started (failures <= "
                f"{step.start_failure_upper_95 or 1:.0%} at 95 %), first answers alike across starts")
    k, n = step.divergent(AS_GIVEN)
    return f"{step.name} repeatable ({_rate(k, n)})"


def _cost(step: StepOutcome, fixed: str) -> str:
    parts = []
    for label, values, unit in (("peak memory", step.peak_memory_bytes, 2**20),
                                ("peak GPU memory", step.peak_gpu_memory_bytes, 2**20),
                                ("time to ready", step.time_to_ready_s, 1)):
        a, b = values.get(AS_GIVEN), values.get(fixed)
        if a and b:
            parts.append(f"{label} {b / unit:.3g} against {a / unit:.3g}{' MiB' if unit > 1 else ' s'} "
                         f"({b / a:.2f}x)")
    return "; ".join(parts) or "not measured"


def _under_load(step: StepOutcome, cost: StepOutcome | None) -> str:
    """The fix's cost under load: its A/B's ratios where that A/B ran at the load point, else its cost step's."""
    if step.load_ratios:
        return f"; under load, with the switch against as given: {'; '.join(step.load_ratios)}"
    if cost is None:
        return ""
    if cost.status == DONE and cost.load_ratios:
        return f"; under load ({cost.name}), with the switch against as given: {'; '.join(cost.load_ratios)}"
    return f"; under load: not measured ({cost.name}: {cost.reason or 'no load phase answered'})"


def _switch_finding(switch: Switch, step: StepOutcome, others: list[str], cost: StepOutcome | None = None
                    ) -> Finding | None:
    fixed = f"{switch.name}_repeatable"
    if not step.varies(AS_GIVEN):
        return None  # not reproduced in its A/B: no evidence either way (the step says so)
    (k_a, n_a), (k_b, n_b) = step.divergent(AS_GIVEN), step.divergent(fixed)
    removes = not step.varies(fixed)
    rate = compare_rates(k_a, n_a, k_b, n_b)
    if not removes and rate.verdict != LOWER:
        return None
    verb = "removes" if removes else "lowers"
    evidence = (f"A/B {step.name}: as given {_rate(k_a, n_a)}; with {switch.key}={switch.repeatable!r} "
                f"{_rate(k_b, n_b)}; difference {rate.difference:+.1%} ({rate.lower_95:+.1%} to {rate.upper_95:+.1%} "
                f"at 95 %, Fisher p {rate.p_lower:.2g})", *where(step),
                *(f"with the switch repeatable: {w}" for w in where(step, fixed)),
                *(["with the switch repeatable: no variation (one signature a cell, the cold first request like the "
                   "warm ones, sequential like concurrent)"] if removes else []),
                *(f"side effect: {s}" for s in step.side_effects))
    return Finding(0, f"switch ({verb})", switch.name, f"{switch.name}: {switch.mechanism}; setting {switch.key} to "
                   f"{switch.repeatable!r} {verb} the variation", evidence,
                   "; ".join(others) or "nothing else was tried",
                   f"{switch.fix_cost}; measured: {_cost(step, fixed)}{_under_load(step, cost)}",
                   step.command, step.run_dir, (3.0 if removes else 2.0) + k_a / max(1, n_a) - k_b / max(1, n_b))


def _unexplained(varied: list[StepOutcome], located: StepOutcome | None, repeatable: list[str], tried: list[str],
                 untried: list[str]) -> Finding:
    """Variation no switch tried removes; where `locate` ran (a hooked engine), the module it first split in."""
    step, split = varied[0], located.split if located else ""
    title = f"variation no switch tried removes (first in {step.name})" + (f"; it first splits in {split}" if split
                                                                            else "")
    nxt = (f"the op probe at the split's shapes is next (`{located.command} --probe`)" if located and split else
           "the op probes (`orchestrator probe`) at the engine's shapes are next" if located else
           "the op probes (`orchestrator probe`) at the engine's shapes and, on a hooked engine, `orchestrator "
           "locate` are next (not run by triage)")
    evidence = (*((f"locate (`{located.command}`): {line}" for line in located.answer) if located else ()),
                *(w for s in varied for w in where(s)))
    return Finding(0, "unexplained", split.split(" ", 1)[0] if split else "variation", title, evidence,
                   "; ".join(repeatable) or "nothing",
                   f"unknown: {nxt}" + (f"; switches tried: {', '.join(tried)}" if tried else "")
                   + (f"; not tried for the budget: {', '.join(untried)} (a larger --budget-requests runs them)"
                      if untried else ""),
                   step.command, step.run_dir, 1.0)


def rank(state: TriageState, engine: str) -> Findings:
    """The findings of a triage's state, ranked."""
    done = [s for s in state.steps.values() if s.status == DONE]
    switches = {f"switch_{s.name}": s for s in profile_for(engine).switches}
    # the steps of cells: no onset, no A/B (a switch's, or its cost at the load point)
    first = [s for s in done if s.name not in switches and not s.name.startswith(COST) and not s.answer]
    repeatable = [summary(s) for s in first if not s.varies(AS_GIVEN)]
    found: list[Finding] = []
    for step in done:
        if step.name in switches:
            made = _switch_finding(switches[step.name], step, repeatable,
                                   state.steps.get(f"{COST}{switches[step.name].name}"))
            found += [made] if made else []
    varied = [s for s in first if s.varies(AS_GIVEN)]
    located = state.steps.get(LOCATE)
    located = located if located and located.status == DONE else None
    if varied and not any(f.kind == "switch (removes)" for f in found):
        found.append(_unexplained(varied, located, repeatable, [s.name for s in done if s.name in switches],
                                  [s.name for s in state.steps.values() if s.name in switches and s.status == SKIPPED
                                   and s.reason.startswith(BUDGET)]))
    starts = state.steps.get("starts")
    if starts and starts.status in (DONE, FAILED) and starts.starts_ready < starts.starts:  # none started: failed
        found.append(Finding(0, "starts", "start failure", f"{starts.starts - starts.starts_ready} of {starts.starts} "
                             "starts failed", (f"start failures <= {starts.start_failure_upper_95:.0%} at 95 %",)
                             if starts.start_failure_upper_95 is not None else (),
                             "", "unknown", starts.command, starts.run_dir, 1.5))
    for step in [s for s in done if s.known_issues][:1]:  # every step's guard judges the same versions
        found += [Finding(0, KNOWN, KNOWN, line, (f"{step.name}: the guard's versions check",), "",
                          "see the issue's fix", step.command, step.run_dir, 0.5) for line in step.known_issues]
    onset = state.steps.get("onset")
    along = tuple(f"onset ({onset.command}): {line}" for line in onset.answer) if onset and onset.status == DONE else ()
    ranked = tuple(replace(f, rank=i + 1, evidence=f.evidence + (along if f.kind != KNOWN else ()))
                   for i, f in enumerate(sorted(found, key=lambda f: -f.score)))
    k = sum(s.divergent(AS_GIVEN)[0] for s in first)
    n = sum(s.divergent(AS_GIVEN)[1] for s in first)
    high = divergence_bound(k, n)[1]
    skipped = [s.name for s in state.steps.values() if s.status == SKIPPED and s.reason.startswith(BUDGET)]
    known = [f for f in ranked if f.kind == KNOWN]
    if len(ranked) > len(known):
        verdict = f"most likely cause: {ranked[0].title}"
    else:
        verdict = (f"{REPEATABLE}: {k} divergent of {n} requests over {len(first)} steps (<= {high:.1%} at 95 %)"
                   + (f"; not tried: {', '.join(skipped)}" if skipped else "")
                   + (f"; {len(known)} known issue(s) of its versions" if known else ""))
    not_run = tuple(line for line in NOT_RUN if not (located and "locate" in line))
    load = state.steps.get("load")
    return Findings(state.arm, verdict, ranked, tuple(state.steps.values()), k, n, high, not_run,
                    load.load_cost if load and load.status == DONE else ())
