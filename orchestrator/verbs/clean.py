"""`orchestrator clean [--run RUN_ID]`: the containers (or processes) dead runs left, removed; never a live
run's (runtime/reaper.py)."""

from __future__ import annotations

from orchestrator.console import Outcome, answer
from orchestrator.verbs.arguments import parser, runtime_named


def main(argv: list[str]) -> Outcome:
    from orchestrator.runtime import KINDS
    from orchestrator.runtime.reaper import clean

    made = parser("clean", docker_host=True, description="Remove what dead runs left; never a live run's.")
    made.add_argument("--run", help="only this run id (default: every run the orchestrator started)")
    made.add_argument("--runtime", choices=KINDS, default="docker",
                      help="process: kill local server processes a killed run left (docs/runtimes.md)")
    made.add_argument("--other-hosts", action="store_true", help="also what runs on other hosts started")
    args = made.parse_args(argv)
    return answer(clean(runtime_named(args.runtime, args.docker_host), args.run or "", args.other_hosts))
