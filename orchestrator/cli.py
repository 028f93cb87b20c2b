"""Command line: thin verbs over the library.

    orchestrator run [HYDRA OVERRIDES...]   compose conf/, run the study, write the report
    orchestrator compare RUN_DIR            re-make the report of a finished run from its Parquet record
    orchestrator clean [--run RUN_ID]       remove containers a crashed run left behind
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import secrets
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.errors import OrchestratorError
from orchestrator.paths import RunPaths, atomic_write_text

USAGE = __doc__ or ""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.strip())
        return 0
    verb, rest = argv[0], argv[1:]
    verbs = {"run": _run, "compare": _compare, "clean": _clean}
    if verb not in verbs:
        from orchestrator.errors import did_you_mean

        print(f"error: unknown command '{verb}'.{did_you_mean(verb, verbs)}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)  # `docker stop`/kill: same clean-up path as Ctrl-C
    try:
        return verbs[verb](rest)
    except OrchestratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("interrupted: containers of this run were stopped and removed", file=sys.stderr)
        return 130


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt


def _run(argv: list[str]) -> int:
    from orchestrator import config

    if not any(a in ("-m", "--multirun") or a.startswith("--") for a in argv):
        # Compose once up front so a typo is one clear line and exit 2, before anything starts.
        typed = config.to_typed(config.compose(argv))
        config.resolve_prompts(typed.prompts)
    import hydra

    from orchestrator.schema import register_configs

    register_configs()
    status: dict[str, int] = {"code": 0}

    @hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name=config.CONFIG_NAME)
    def task(cfg: Any) -> None:
        status["code"] = run_study(cfg)

    saved = sys.argv
    sys.argv = ["orchestrator", *argv]
    try:
        task()
    finally:
        sys.argv = saved
    return status["code"]


def run_study(cfg: Any) -> int:
    """The Hydra task: one study into Hydra's run dir. Returns the exit status."""
    from hydra.core.hydra_config import HydraConfig

    from orchestrator import config, report
    from orchestrator.runtime import make_runtime
    from orchestrator.runtime.base import LABEL_NS
    from orchestrator.study import StudyRunner

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the progress
    try:
        typed = config.to_typed(cfg)
        paths = RunPaths(Path(HydraConfig.get().runtime.output_dir))
        run_id = f"{re.sub(r'[^A-Za-z0-9_.-]', '-', paths.root.name)}-{secrets.token_hex(3)}"
        meta = {"study": typed.study.name, "run_id": run_id, "baseline": typed.baseline_arm}
        atomic_write_text(paths.meta, json.dumps(meta, indent=2) + "\n")
        runtime = make_runtime(typed.runtime)
        runner = StudyRunner(typed, paths, run_id, runtime)
        try:
            runner.run()
        finally:
            runtime.cleanup({f"{LABEL_NS}.run": run_id})  # belt and braces: nothing of this run survives
        result = report.build(paths, **meta)
    except OrchestratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_status) from None
    _print_summary(paths, result)
    if runner.failed:
        print(f"error: arm(s) failed: {', '.join(runner.failed)} (see {paths.report_md})", file=sys.stderr)
        return 1
    return 0


def _print_summary(paths: RunPaths, result: dict[str, Any]) -> None:
    from orchestrator.report import cells_table

    print(cells_table(result))
    print(f"\nReport: {paths.report_md}\nRecord: {paths.data}")


def _compare(argv: list[str]) -> int:
    from orchestrator import report
    from orchestrator.errors import RecordError

    parser = argparse.ArgumentParser(prog="orchestrator compare", description="Re-make a run's report.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true", help="print report.json instead of the table")
    args = parser.parse_args(argv)
    paths = RunPaths(args.run_dir)
    if not paths.meta.is_file():
        raise RecordError(f"{args.run_dir} is not a run directory (no run.json): pass the folder "
                          "`orchestrator run` printed")
    result = report.build(paths, **json.loads(paths.meta.read_text()))
    if args.json:
        print(paths.report_json.read_text(), end="")
    else:
        _print_summary(paths, result)
    return 0


def _clean(argv: list[str]) -> int:
    from orchestrator.runtime.base import LABEL_NS
    from orchestrator.runtime.docker import DockerRuntime

    parser = argparse.ArgumentParser(prog="orchestrator clean",
                                     description="Remove containers left by crashed runs.")
    parser.add_argument("--run", help="only this run id (default: every orchestrator container)")
    parser.add_argument("--docker-host", default=None)
    args = parser.parse_args(argv)
    labels = {f"{LABEL_NS}.run": args.run or ""}
    removed = DockerRuntime(args.docker_host).cleanup(labels)
    print(f"removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}")
    return 0
