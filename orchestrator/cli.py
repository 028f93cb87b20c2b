"""Command line: the verb's name picks its module, `orchestrator/verbs/VERB.py`, whose `main` parses its
arguments and calls the stage that does the work; here only the dispatch, and the way a verb ends.

    orchestrator run [HYDRA OVERRIDES...]      run a study (-m: a sweep); report into the run dir
    orchestrator run --from RUN_DIR            run the study a run dir recorded (someone else's, too)
    orchestrator run --resume RUN_DIR          finish an interrupted run: send what has no row, keep the rest
    orchestrator check [HYDRA OVERRIDES...]    every check `run` makes before it starts an arm; exit 0 or 2
    orchestrator plan [HYDRA OVERRIDES...] [--like RUN]  each arm's `docker run`, requests and expected time
    orchestrator compare RUN_DIR... [--gate]   re-make the reports from the record; exit 3 on a failed gate
    orchestrator reproduce RUN_DIR             re-run with the images pinned by id; verdict per cell
    orchestrator clean [--run RUN_ID]          remove containers (or processes) a crashed run left
    orchestrator fingerprint [--image IMG]     this host's (or an image's) fingerprint and matrix key
    orchestrator probe [--preset NAME]         GEMM or ops kernel probes in an arm's image or as a process
    orchestrator ls [DIR]                      the runs below DIR (default runs): study, arms, verdict, path
    orchestrator show RUN_DIR [--cell CELL]    a run's verdict, environment and the cells that diverged
    orchestrator locate RUN_DIR --cell CELL    the first module where a cell's two requests split (digests)
    orchestrator matrix RUN_DIR... [--out OUT] the support matrix of run dirs from any machines (md/html/json/csv)
    orchestrator import SOURCE --out RUN_DIR   detLLM, OpenAI answers, position parity: a run dir
    orchestrator claims FILE [--study NAME] [--run RUN_DIR...]  claims replicated, contradicted or inconclusive
    orchestrator bundle RUN_DIR [--out FILE]   the run, its arms' build contexts and checksums in one file; run
                                               --from, reproduce and compare take it for RUN_DIR
    orchestrator triage [OVERRIDES...] [--plan]  the seed's checks on one arm as a procedure; findings ranked

`orchestrator VERB --help` for a verb's options; --debug shows a traceback. Exit statuses: 0 ok, 1 internal
error, 2 bad input, 3 gate failed, 4 measurement failed, 130 interrupted (docs/errors.md).
"""

# Only dispatching here: what a verb ends with is printed, and its status picked, by console.py.

from __future__ import annotations

import importlib
import os
import sys

from orchestrator.console import Outcome, answer, failed, finish
from orchestrator.errors import OrchestratorError, UsageError, did_you_mean
from orchestrator.interrupts import interruptible, noted_after

USAGE = __doc__ or ""
VERBS = ("run", "check", "plan", "compare", "reproduce", "clean", "fingerprint", "probe", "ls", "show", "locate",
         "matrix", "import", "claims", "bundle", "triage")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("ORCHESTRATOR_DEBUG") == "1"
    argv = [arg for arg in argv if arg != "--debug"]
    if not argv or argv[0] in ("-h", "--help", "help"):
        return finish(answer(USAGE.strip()))
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        return finish(failed(UsageError(f"unknown command '{verb}'.{did_you_mean(verb, VERBS)}")))
    with interruptible():
        return _verb(verb, rest, debug)


def _verb(verb: str, rest: list[str], debug: bool) -> int:
    try:
        with noted_after():
            outcome: Outcome = importlib.import_module(f"orchestrator.verbs.{verb}").main(rest)
    except BrokenPipeError:  # `show RUN | head`: the reader left; entry() ends quietly
        raise
    except Exception as exc:  # a bug: one line, the traceback only when asked for
        if debug and not isinstance(exc, OrchestratorError):
            raise
        return finish(failed(exc))
    except KeyboardInterrupt as exc:
        return finish(failed(exc))
    return finish(outcome)
