"""Command line: each verb parses its arguments and calls one function of the stage that owns it.

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
    orchestrator ls [DIR] | show RUN_DIR       the runs below DIR (default runs) | a run's verdict, environment
    orchestrator locate RUN_DIR --cell CELL    the first module where a cell's two requests split (digests)

`orchestrator VERB --help` for a verb's options; --debug shows a traceback. Exit statuses: 0 ok, 1 internal
error, 2 bad input, 3 gate failed, 4 measurement failed, 130 interrupted (docs/errors.md).
"""
# Only parsing here: what a verb ends with is printed, and its status picked, by console.py.

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.console import Outcome, answer, failed, finish
from orchestrator.errors import OrchestratorError, UsageError, did_you_mean
from orchestrator.interrupts import interruptible, noted_after

USAGE = __doc__ or ""


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
            outcome = VERBS[verb](rest)
    except BrokenPipeError:  # `show RUN | head`: the reader left; entry() ends quietly
        raise
    except Exception as exc:  # a bug: one line, the traceback only when asked for
        if debug and not isinstance(exc, OrchestratorError):
            raise
        return finish(failed(exc))
    except KeyboardInterrupt as exc:
        return finish(failed(exc))
    return finish(outcome)


def _run(argv: list[str]) -> Outcome:
    if argv[:1] not in (["--from"], ["--resume"]):
        from orchestrator.sweep.app import run_with_hydra

        return run_with_hydra(argv)
    from orchestrator.reproduce.rerun import run_from
    from orchestrator.reproduce.resume import resume

    parser = _parser("run", "Run the study a run dir recorded (--from: into a new run dir; --resume: finish it)")
    parser.add_argument(argv[0], dest="run_dir", type=Path, required=True, metavar="RUN_DIR")
    args = _rerun_options(parser).parse_intermixed_args(argv)
    if argv[0] == "--resume" and (args.output or args.out):
        parser.error(f"--resume finishes {args.run_dir} in place: it takes no --out, no hydra.run.dir")
    return (resume(args.run_dir, args.allow) if argv[0] == "--resume"
            else run_from(args.run_dir, args.out, args.allow, args.output))


def _compare(argv: list[str]) -> Outcome:
    from orchestrator.report.verdict import recompare

    parser = _parser("compare", "Re-make a run's report.")
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="one run, or several as one study")
    parser.add_argument("--out", type=Path, default=None, help="where the reports go (needed for several runs)")
    parser.add_argument("--baseline", default=None, help="baseline arm (several runs: RUN_DIR_NAME/ARM)")
    parser.add_argument("--json", action="store_true", help="print report.json instead of the table")
    parser.add_argument("--max-divergence-rate", type=float, help="exit 3 if a cell's divergent/n exceeds this")
    parser.add_argument("--expect-pair", action="append", default=[], help="ARM=identical|agree|differ vs baseline")
    parser.add_argument("--expect-schedule", action="append", default=[], help="ARM=identical|agree|differ, phases")
    parser.add_argument("--gate", action="store_true", help="also apply the gate the run was configured with")
    parser.add_argument("--branches", type=int, help="explorer: branches shown per divergent cell (default: the "
                        "run's study.explorer_branches, 4)")
    a = parser.parse_args(argv)
    return recompare(a.run_dirs, a.out, a.baseline, a.json, a.gate, a.max_divergence_rate, a.expect_pair,
                     a.expect_schedule, a.branches)


def _reproduce(argv: list[str]) -> Outcome:
    from orchestrator.reproduce.rerun import reproduce

    parser = _parser("reproduce", "Re-run a run dir with its images pinned and compare signatures.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--by-tag", action="store_true", help="use the image tags, not the original image ids")
    args = _rerun_options(parser).parse_intermixed_args(argv)
    return reproduce(args.run_dir, args.out, args.allow, args.by_tag, args.output)


def _fingerprint(argv: list[str]) -> Outcome:
    from orchestrator.guard.fingerprint import fingerprint_verb

    parser = _parser("fingerprint", "Fingerprint this host, or an image, and its matrix key. No network.", True)
    parser.add_argument("--image", help="fingerprint inside a throwaway container of this image (no network)")
    parser.add_argument("--json", action="store_true", help="one JSON object for machines")
    a = parser.parse_args(argv)
    return fingerprint_verb(_runtime("process" if a.image is None else "docker", a.docker_host), a.image, a.json)


def _probe(argv: list[str]) -> Outcome:
    from orchestrator.config import probe, search
    from orchestrator.run.kernel_probes import probe_config, probe_verb

    parser = _parser("probe", docker_host=True, description="Kernel probes, GEMM or ops (docs/probes.md).")
    parser.add_argument("--preset", default="cpu_small", help=f"conf/probe/NAME or YAML ({', '.join(probe.presets())})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset key")
    parser.add_argument("--local", action="store_true",
                        help="run as a local process (hosts without Docker): under --arm's interpreter, else this one")
    parser.add_argument("--image", help="run in a container of this image (overrides the preset)")
    parser.add_argument("--arm", help="run as the arm ARM ran (an arm of the study in --out) or runs (conf/arm, "
                        "DIR/arm of a --config-dir): its image and gpus, or as a process its interpreter and code")
    parser.add_argument("--out", type=Path, help="run directory (default runs/probes/PRESET-TIME)")
    parser.add_argument("--ingest", type=Path, nargs="+", metavar="RAW", help="record these raw JSONL outputs")
    parser.add_argument("--print-spec", action="store_true", help="print the JSON spec for the probe and exit")
    a = parser.parse_args((split := search.split_config_dirs(argv))[1])  # --config-dir DIR: where --arm is found
    return probe_verb(probe_config(a.preset, a.set, a.arm, a.image, split[0], a.out), a.docker_host, a.out,
                      a.local, a.ingest, a.print_spec)


def _clean(argv: list[str]) -> Outcome:
    from orchestrator.runtime import KINDS
    from orchestrator.runtime.reaper import clean

    parser = _parser("clean", docker_host=True, description="Remove what dead runs left; never a live run's.")
    parser.add_argument("--run", help="only this run id (default: every run the orchestrator started)")
    parser.add_argument("--runtime", choices=KINDS, default="docker",
                        help="process: kill local server processes a killed run left (docs/runtimes.md)")
    parser.add_argument("--other-hosts", action="store_true", help="also what runs on other hosts started")
    args = parser.parse_args(argv)
    return answer(clean(_runtime(args.runtime, args.docker_host), args.run or "", args.other_hosts))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage and exits)
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def _parser(verb: str, description: str, docker_host: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"orchestrator {verb}", description=description, allow_abbrev=False)
    if docker_host:
        parser.add_argument("--docker-host", default=None, help="the Docker host (default: DOCKER_HOST)")
    return parser


def _rerun_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A run dir's study again: someone else's config, so its dangerous options need --allow here."""
    from orchestrator.config.security import KINDS

    parser.add_argument("--out", type=Path, default=None, help="the new run dir")
    parser.add_argument("output", nargs="*", metavar="hydra.run.dir=DIR",
                        help="or Hydra's hydra.run.dir=DIR, or hydra.sweep.dir=DIR hydra.sweep.subdir=NAME")
    parser.add_argument("--allow", action="append", default=[], choices=KINDS, help="accept this dangerous option")
    return parser


def _runtime(kind: str, docker_host: str | None) -> Any:
    from orchestrator.config.arms import runtime_named

    return runtime_named(kind, docker_host)


def _delegate(module: str, function: str) -> Callable[[list[str]], Outcome]:
    """A verb whose arguments are parsed where they are used (Hydra overrides, or the verb's own parser)."""
    return lambda argv: getattr(importlib.import_module(module), function)(argv)


VERBS: dict[str, Callable[[list[str]], Outcome]] = {
    "run": _run, "check": _delegate("orchestrator.run.refusals", "check"),
    "plan": _delegate("orchestrator.run.plan", "plan_verb"), "compare": _compare, "reproduce": _reproduce,
    "clean": _clean, "fingerprint": _fingerprint, "probe": _probe,
    "ls": _delegate("orchestrator.report.listing", "ls_verb"),
    "show": _delegate("orchestrator.report.listing", "show_verb"),
    "locate": _delegate("orchestrator.run.locate_verb", "locate_verb")}
