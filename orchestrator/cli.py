"""Command line: each verb parses its arguments and calls one function of the stage that owns it.

    orchestrator run [HYDRA OVERRIDES...]      run a study (-m: a sweep); report into the run dir
    orchestrator run --from RUN_DIR            run the study a run dir recorded (someone else's, too)
    orchestrator plan [HYDRA OVERRIDES...]     each arm's equivalent `docker run`; starts nothing
    orchestrator compare RUN_DIR... [--gate]   re-make the reports from the record; exit 3 on a failed gate
    orchestrator reproduce RUN_DIR             re-run with the images pinned by id; verdict per cell
    orchestrator clean [--run RUN_ID]          remove containers (or processes) a crashed run left
    orchestrator fingerprint [--image IMG]     this host's (or an image's) fingerprint and matrix key
    orchestrator probe [--preset NAME]         GEMM kernel probes in an arm's image or as a local process
    orchestrator ls [DIR] | show RUN_DIR       the runs below DIR (default runs) | a run's verdict, environment

`orchestrator VERB --help` for a verb's options. Exit statuses: 0 ok, 1 internal error, 2 bad input,
3 gate failed, 4 measurement failed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.errors import ExitStatus, OrchestratorError, did_you_mean

USAGE = __doc__ or ""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.strip())
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"error: unknown command '{verb}'.{did_you_mean(verb, VERBS)}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    signal.signal(signal.SIGTERM, _interrupt)  # `docker stop`/kill: same clean-up path as Ctrl-C
    # A process started in the background by a shell inherits SIGINT ignored: Ctrl-C (or SIGINT from a
    # supervisor) must still stop the study and clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return VERBS[verb](rest)
    except OrchestratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("interrupted: containers of this run were stopped and removed", file=sys.stderr)
        return ExitStatus.INTERRUPTED


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt


def _run(argv: list[str]) -> int:
    if argv[:1] != ["--from"]:
        from orchestrator.sweep.app import run_with_hydra

        return run_with_hydra(argv)
    from orchestrator.reproduce.rerun import run_from

    parser = _parser("run", "Run the study a run dir recorded, on this machine, into a new run dir.")
    parser.add_argument("--from", dest="run_dir", type=Path, required=True, metavar="RUN_DIR")
    args = _rerun_options(parser).parse_args(argv)
    return run_from(args.run_dir, args.out, args.allow)


def _plan(argv: list[str]) -> int:
    from orchestrator.run.plan import plan

    print(plan(argv), end="")
    return 0


def _compare(argv: list[str]) -> int:
    from orchestrator.analysis.gate import gate_from_flags
    from orchestrator.report.build import rebuild
    from orchestrator.run.execute import gate_failed, print_summary

    parser = _parser("compare", "Re-make a run's report.")
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="one run, or several as one study")
    parser.add_argument("--out", type=Path, default=None, help="where the reports go (needed for several runs)")
    parser.add_argument("--baseline", default=None, help="baseline arm (several runs: RUN_DIR_NAME/ARM)")
    parser.add_argument("--json", action="store_true", help="print report.json instead of the table")
    parser.add_argument("--max-divergence-rate", type=float, help="exit 3 if a cell's divergent/n exceeds this")
    parser.add_argument("--expect-pair", action="append", default=[], help="ARM=identical|differ vs the baseline")
    parser.add_argument("--expect-schedule", action="append", default=[], help="ARM=identical|differ across phases")
    parser.add_argument("--gate", action="store_true", help="also apply the gate the run was configured with")
    args = parser.parse_args(argv)
    paths, report, meta = rebuild(args.run_dirs, args.out, args.baseline)
    if args.json:
        print(paths.report_json.read_text(), end="")
    else:
        print_summary(paths, report)
    gate = gate_from_flags(meta.get("gate") if args.gate else None, args.max_divergence_rate, args.expect_pair,
                           args.expect_schedule)
    return ExitStatus.GATE_FAILED if gate_failed(report.comparison, gate) else ExitStatus.OK


def _reproduce(argv: list[str]) -> int:
    from orchestrator.reproduce.rerun import reproduce

    parser = _parser("reproduce", "Re-run a run dir with its images pinned and compare signatures.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--by-tag", action="store_true", help="use the image tags, not the original image ids")
    args = _rerun_options(parser).parse_args(argv)
    return reproduce(args.run_dir, args.out, args.allow, args.by_tag)


def _fingerprint(argv: list[str]) -> int:
    from orchestrator.guard.fingerprint import fingerprint_target, render

    parser = _parser("fingerprint", "Fingerprint this host, or an image, and its matrix key. No network.", True)
    parser.add_argument("--image", help="fingerprint inside a throwaway container of this image (no network)")
    parser.add_argument("--json", action="store_true", help="one JSON object for machines")
    args = parser.parse_args(argv)
    runtime = _runtime("process" if args.image is None else "docker", args.docker_host)
    result = fingerprint_target(runtime, args.image, "fingerprint")
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else render(result))
    return ExitStatus.MEASUREMENT_FAILED if result["fingerprint"].get("probe", {}).get("error") else ExitStatus.OK


def _probe(argv: list[str]) -> int:
    from orchestrator.config.probe import load_probe_config, presets
    from orchestrator.report.probes import render_markdown
    from orchestrator.run.kernel_probes import probe

    parser = _parser("probe", docker_host=True, description="GEMM kernel probes (docs/probes.md).")
    parser.add_argument("--preset", default="cpu_small", help=f"conf/probe/NAME or a YAML ({', '.join(presets())})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset key")
    parser.add_argument("--local", action="store_true", help="run as a local process (hosts without Docker)")
    parser.add_argument("--image", help="run in a container of this image (overrides the preset)")
    parser.add_argument("--arm", help="take image and gpus from the arm conf/arm/ARM.yaml (its defaults applied)")
    parser.add_argument("--out", type=Path, help="run directory (default runs/probes/PRESET-TIME)")
    parser.add_argument("--ingest", type=Path, nargs="+", metavar="RAW", help="record these raw JSONL outputs")
    parser.add_argument("--print-spec", action="store_true", help="print the JSON spec for gemm.py and exit")
    args = parser.parse_args(argv)
    config = load_probe_config(args.preset, args.set, args.arm, args.image)
    if args.print_spec:
        print(json.dumps(config.spec()))
        return ExitStatus.OK
    runtime = _runtime("process" if args.local or args.ingest else "docker", args.docker_host)
    run = probe(config, runtime, args.out, args.local, args.ingest)
    print(render_markdown(run.rows))
    print(f"Record: {run.paths.table('probes')}\nReport: {run.paths.root / 'probes.md'}")
    return ExitStatus.OK


def _listing(verb: str, argv: list[str]) -> int:
    from orchestrator.report.listing import verb_main

    return verb_main(verb, argv)


def _clean(argv: list[str]) -> int:
    from orchestrator.runtime import KINDS
    from orchestrator.runtime.spec import run_labels

    parser = _parser("clean", docker_host=True, description="Remove what crashed runs left behind.")
    parser.add_argument("--run", help="only this run id (default: everything the orchestrator started)")
    parser.add_argument("--runtime", choices=KINDS, default="docker",
                        help="process: kill local server processes a killed run left (docs/runtimes.md)")
    args = parser.parse_args(argv)
    removed = _runtime(args.runtime, args.docker_host).cleanup(run_labels(args.run or ""))
    what = "process(es)" if args.runtime == "process" else "container(s)"
    print(f"removed {len(removed)} {what}{': ' + ', '.join(removed) if removed else ''}")
    return ExitStatus.OK


def _parser(verb: str, description: str, docker_host: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"orchestrator {verb}", description=description)
    if docker_host:
        parser.add_argument("--docker-host", default=None, help="the Docker engine (default: DOCKER_HOST)")
    return parser


def _rerun_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A run dir's study again: someone else's config, so its dangerous options need --allow here."""
    from orchestrator.config.security import KINDS

    parser.add_argument("--out", type=Path, default=None, help="the new run dir")
    parser.add_argument("--allow", action="append", default=[], choices=KINDS, help="accept this dangerous option")
    return parser


def _runtime(kind: str, docker_host: str | None) -> Any:
    """The runtime a verb without a study config uses (the config's defaults otherwise)."""
    from orchestrator.config.arms import runtime_for
    from orchestrator.config.schema import RuntimeConfig, RuntimeKind

    return runtime_for(RuntimeConfig(kind=RuntimeKind(kind), docker_host=docker_host))


VERBS: dict[str, Callable[[list[str]], int]] = {"run": _run, "plan": _plan, "compare": _compare,
         "reproduce": _reproduce, "clean": _clean, "fingerprint": _fingerprint, "probe": _probe,
         "ls": lambda argv: _listing("ls", argv), "show": lambda argv: _listing("show", argv)}
