"""`orchestrator triage [--config-dir DIR] [OVERRIDES...] [--arm NAME] | --from RUN_DIR [--arm NAME] | --resume
DIR`: the seed's checks run on one arm as a procedure (triage/), each step a study with its own run dir, the
findings ranked in findings.md, .html, .json (docs/triage.md); `--plan` prints the steps and their budget."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from orchestrator.console import Outcome, answer, note
from orchestrator.errors import ExitStatus, UsageError
from orchestrator.verbs.arguments import parser

DEFAULTS = {"budget_requests": 400, "target_bound": 0.1, "start_bound": 0.5, "long_prompt_tokens": 3000}


def _parser() -> Any:
    made = parser("triage", "Run the seed's checks on one arm as a procedure (starts, the floor, sequential against "
                  "concurrent, a long prompt, each determinism switch as an A/B) and rank what it finds.")
    made.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra overrides composing the study, as "
                      "`run` takes them (e.g. runtime=process arm@arms.baseline=reference_process)")
    made.add_argument("--config-dir", action="append", type=Path, default=[], help="a config dir of yours")
    made.add_argument("--arm", default=None, help="the study's arm to triage (default: its baseline)")
    made.add_argument("--from", dest="from_run", type=Path, default=None, metavar="RUN_DIR",
                      help="the arm a run dir recorded, instead of overrides")
    made.add_argument("--budget-requests", type=int, default=DEFAULTS["budget_requests"],
                      help=f"the most requests every step together sends (default {DEFAULTS['budget_requests']})")
    made.add_argument("--target-bound", type=float, default=DEFAULTS["target_bound"], help="the divergence rate a "
                      f"repeatable step bounds at 95 %% (sizes the floor; default {DEFAULTS['target_bound']})")
    made.add_argument("--start-bound", type=float, default=DEFAULTS["start_bound"], help="the start failure rate "
                      f"clean starts bound at 95 %% (sizes the starts; default {DEFAULTS['start_bound']})")
    made.add_argument("--long-prompt-tokens", type=int, default=DEFAULTS["long_prompt_tokens"],
                      help=f"the long prompt's length (default {DEFAULTS['long_prompt_tokens']})")
    made.add_argument("--out", type=Path, default=None, help="the triage dir (default: triage/<hash of the "
                      "arguments>, so the same command resumes)")
    made.add_argument("--resume", type=Path, default=None, metavar="DIR", help="go on with the triage in DIR")
    made.add_argument("--plan", action="store_true", help="print the steps and their budget; run nothing")
    return made


def main(argv: list[str]) -> Outcome:
    from orchestrator.reproduce.bundle import opened
    from orchestrator.triage import procedure, runner, steps
    from orchestrator.triage.findings import rank
    from orchestrator.triage.page import write
    from orchestrator.triage.state import FAILED, TriageState, load

    made = _parser()
    args = made.parse_intermixed_args(argv)
    if args.resume is not None:
        earlier = load(args.resume)
        if earlier is None:
            raise UsageError(f"{args.resume} holds no triage (no triage.json): give the --out a triage wrote")
        return main([*earlier.asked, *(["--plan"] if args.plan else []), "--out", str(args.resume)])
    for name in ("budget_requests", "long_prompt_tokens"):
        if getattr(args, name) < 1:
            made.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("target_bound", "start_bound"):
        if not 0 < getattr(args, name) < 1:
            made.error(f"--{name.replace('_', '-')} must be between 0 and 1")
    asked = [a for a in argv if a != "--plan" and not a.startswith("--out=")]
    if "--out" in asked:
        at = asked.index("--out")
        asked = asked[:at] + asked[at + 2:]
    source = (runner.source_from_run(opened(args.from_run)[0], args.arm) if args.from_run is not None
              else runner.source_from_overrides(args.overrides, args.config_dir, args.arm))
    sizing = steps.Sizing(args.target_bound, args.start_bound, args.budget_requests, args.long_prompt_tokens)
    if args.plan:
        return answer(*_plan(source, sizing))
    out = args.out or Path("triage") / hashlib.sha256("\0".join(asked).encode()).hexdigest()[:8]
    state = load(out) or TriageState(source.arm_name, asked, args.budget_requests)
    if state.asked != asked:
        raise UsageError(f"{out} holds a triage of other arguments ({' '.join(state.asked)}): give another --out, "
                         "or the same arguments to go on with it")
    try:
        state = procedure.triage(source, sizing, out, state)
    except KeyboardInterrupt as exc:
        # the step's own `run --resume` hint would finish its run dir apart from the triage, which runs it again
        exc.__notes__ = [n for n in getattr(exc, "__notes__", []) if "--resume" not in n]
        exc.add_note(f"the steps done are kept in {out}; go on with: orchestrator triage --resume {out}")
        raise
    found = rank(state, source.engine)
    page = write(found, out)
    failed = [f"{s.name} ({s.reason})" for s in state.steps.values() if s.status == FAILED]
    return (answer(found.verdict, *(f"{f.rank}. {f.title}" for f in found.findings), f"Findings: {page}")
            + (note(f"triage: the measurement failed in {'; '.join(failed)}", status=ExitStatus.MEASUREMENT_FAILED)
               if failed else Outcome()))


def _plan(source: Any, sizing: Any) -> list[str]:
    from orchestrator.triage import inside, steps

    first = steps.first_steps(source, sizing)
    planned = [*first, *(steps.switch_step(s, first[1]) for s in steps.open_switches(source))]
    onsets = [o for o in (steps.onset_step(v, first, sizing) for v in ("concurrent", "length")) if o]
    # `locate` where variation remains, from the digests the steps' requests asked for: no requests of its own
    load = steps.load_step(source, sizing)  # counted in the first line's "+ 1"
    digested = [p.name for p in (*first, load) if p.name in inside.CELL_STEPS
                and (p.spec.protocol.get("request") or {}).get("digests")]
    costs = [steps.cost_step(s, load) for s in steps.open_switches(source)]  # one runs: the switch that explains
    lines = [f"triage of arm '{source.arm_name}' ({source.engine}): "
             f"{len(planned) + bool(onsets) + 1 + bool(costs) + bool(digested)} steps, budget "
             f"{sizing.budget_requests} requests"]
    lines += [f"  {p.name}: up to {p.requests} requests: {p.shows}" for p in planned[:len(first)]]
    lines += [f"  onset (where only concurrent batches, or only the long prompt, varied): up to "
              f"{max(o.requests for o in onsets)} requests: {' or '.join(o.shows for o in onsets)}"] if onsets else []
    lines.append(f"  load: up to {load.requests} requests: {load.shows}")
    lines += [f"  {p.name} (where a step varied): up to {p.requests} requests: {p.shows}" for p in planned[len(first):]]
    lines += [f"  {steps.COST}SWITCH (where a switch removed the variation on another step): up to "
              f"{max(c.requests for c in costs)} requests: its A/B at the load point, what the fix costs under load"
              ] if costs else []
    lines += [f"  {inside.NAME} (where variation remains): no requests of its own: `orchestrator {inside.NAME}` on "
              f"the first cell that varied, from the digests of the {', '.join(digested)} steps' requests"
              ] if digested else []
    total = (sum(p.requests for p in planned) + max((o.requests for o in onsets), default=0) + load.requests
             + max((c.requests for c in costs), default=0))
    lines.append(f"  all steps: up to {total} requests" + (" (more than the budget: the later steps are cut or "
                                                          "skipped)" if total > sizing.budget_requests else ""))
    return lines
