"""The triage as a procedure: the steps in order (triage/steps.py), each run as a study (triage/runner.py) unless
done already (triage.json: a resumed triage goes on where it stopped), skipped where an earlier step made it moot
or the budget is spent, each switch of the engine's profile the arm has on tried as an A/B on the step that
showed variation (the one that removed it, again at the load point: what the fix costs under load), and, on an
engine that records digests, `locate` where variation remains (triage/inside.py).
Progress goes to stderr as each step ends."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from orchestrator.triage import inside, runner, steps
from orchestrator.triage.findings import BUDGET
from orchestrator.triage.observe import observe, observe_onset
from orchestrator.triage.state import DONE, SKIPPED, StepOutcome, TriageState, save
from orchestrator.triage.steps import AS_GIVEN, Planned, Sizing

# a step's study run from its dir (an onset search or not): its exit status and answer (runner.run_step)
Run = Callable[[Path, bool], tuple[int, tuple[str, ...]]]


def _skipped(planned: Planned, reason: str) -> StepOutcome:
    return StepOutcome(name=planned.name, status=SKIPPED, reason=reason)


def _say(outcome: StepOutcome) -> None:
    if outcome.status == SKIPPED:
        print(f"[triage] {outcome.name}: skipped ({outcome.reason})", file=sys.stderr, flush=True)
        return
    if outcome.answer:
        print(f"[triage] {outcome.name}: {outcome.status}, {'; '.join(outcome.answer)}, {outcome.run_dir}",
              file=sys.stderr, flush=True)
        return
    k, n = outcome.divergent(AS_GIVEN)
    print(f"[triage] {outcome.name}: {outcome.status}, {outcome.shown()} ({k} divergent of {n}), {outcome.run_dir}",
          file=sys.stderr, flush=True)


def _step(out: Path, state: TriageState, planned: Planned, run: Run, moot: str = "", reserve: int = 0
          ) -> StepOutcome:
    """Run one step (or take it from the state, or skip it), save the state, and say what it found; `reserve`:
    requests kept for the steps after it."""
    done = state.steps.get(planned.name)
    if done is not None:
        return done
    left = state.budget_requests - state.spent - reserve
    fitted = None if moot else steps.scaled(planned, left)
    if moot or fitted is None:
        kept = f" (kept for the switches' A/Bs: {reserve})" if reserve and left <= 0 else ""
        outcome = _skipped(planned, moot or f"{BUDGET}'s {max(0, left)} requests left{kept} "
                           f"are fewer than its {planned.requests}")
    else:
        step_dir, onset = out / planned.name, fitted.spec.onset is not None
        runner.write_step(step_dir, fitted.spec)
        status, answer = run(step_dir, onset)
        command = shlex.join(runner.command(step_dir, onset))
        outcome = (observe_onset(planned.name, step_dir / "run", command, status, answer) if onset
                   else observe(planned.name, step_dir / "run", command, status))
        if any(p["kind"] == "load" for p in fitted.spec.protocol["phases"].values()):  # its background and
            outcome = replace(outcome, requests=max(outcome.requests, fitted.requests))  # warm-up count too
    state.steps[planned.name] = outcome
    save(out, state)
    _say(outcome)
    return outcome


def triage(source: runner.Source, sizing: Sizing, out: Path, state: TriageState, run: Run = runner.run_step
           ) -> TriageState:
    """Every step in order; returns the state with each step's outcome."""
    planned = steps.first_steps(source, sizing)
    witness: Planned | None = None
    started = True
    for step in planned:
        moot = "" if started else "the arm did not start"
        outcome = _step(out, state, step, run, moot)
        if step.name == "starts" and outcome.status != SKIPPED and outcome.starts_ready == 0:
            started = False
        # the A/Bs run on the first step that varied, a step of requests rather than of starts where one varied
        if outcome.status == DONE and outcome.varies(AS_GIVEN) and (witness is None or witness.name == "starts"):
            witness = step
    varied = [name for name in ("floor", "concurrent", "length") if name in state.steps
              and state.steps[name].status == DONE and state.steps[name].varies(AS_GIVEN)]
    onset = steps.onset_step(varied[0] if varied else "", planned, sizing)
    switches = [steps.switch_step(switch, witness or planned[1]) for switch in steps.open_switches(source)]
    if onset is not None:  # within what the switches' A/Bs leave: they say why, the onset says where
        _step(out, state, onset, run, "" if started else "the arm did not start",
              reserve=sum(s.requests for s in switches if s.name not in state.steps))
    elif "onset" not in state.steps:  # said, so the findings show it was not left out by the budget
        state.steps["onset"] = StepOutcome("onset", SKIPPED, reason="no variation to find an onset of" if not varied
                                           else f"it varied already one request at a time ({varied[0]})")
        save(out, state)
    # a load point, within what the switches' A/Bs leave: divergence under load, and what the arm costs there
    load = steps.load_step(source, sizing)
    loaded = _step(out, state, load, run, "" if started else "the arm did not start",
                   reserve=sum(s.requests for s in switches if s.name not in state.steps))
    if witness is None and loaded.status == DONE and loaded.varies(AS_GIVEN):  # the A/Bs at that load point
        witness = load
        switches = [steps.switch_step(switch, load) for switch in steps.open_switches(source)]
    explained = ""
    for switch, ab in zip(steps.open_switches(source), switches, strict=True):
        moot = ("the arm did not start" if not started else "no step showed variation for it to remove"
                if witness is None else f"the variation is explained by {explained}" if explained else "")
        outcome = _step(out, state, ab, run, moot)
        fixed = f"{switch.name}_repeatable"
        if outcome.status == DONE and outcome.varies(AS_GIVEN) and not outcome.varies(fixed):
            explained = explained or switch.name
    # what the fix costs under load: the switch that removed the variation, its A/B again at the load point (unless
    # its A/B ran there: the load point was its witness), within what the budget leaves
    fixer = next((s for s in steps.open_switches(source) if s.name == explained), None)
    if fixer is not None and witness is not load:
        _step(out, state, steps.cost_step(fixer, load), run, "" if started else "the arm did not start")
    if inside.records_digests(source.engine) and inside.NAME not in state.steps:  # where it remains: which module
        state.steps[inside.NAME] = inside.locate_step(state, "the arm did not start" if not started else
                                                      f"the variation is explained by {explained}" if explained else "")
        save(out, state)
        _say(state.steps[inside.NAME])
    return state
