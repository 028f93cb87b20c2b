"""Command line: thin verbs over the library.

    orchestrator run [HYDRA OVERRIDES...]   compose conf/, run the study, write the report
    orchestrator plan [HYDRA OVERRIDES...]  print each arm's equivalent `docker run`; starts nothing
    orchestrator compare RUN_DIR [--json] [--max-divergence-rate R] [--expect-pair ARM=VERDICT] [--gate]
                                            re-make the reports of a finished run from its Parquet record;
                                            exit 3 when a stated expectation fails
    orchestrator reproduce RUN_DIR [--allow KIND] [--by-tag]
                                            re-run a run dir with its images pinned by id; verdict per cell
                                            (exit 0 reproduced, 3 differs)
    orchestrator clean [--run RUN_ID] [--runtime process]   remove containers (or local server
                                            processes) a crashed run left behind
    orchestrator fingerprint [--image IMG] [--json]   this host's (or an image's) fingerprint and matrix key
    orchestrator probe [--preset NAME] [--local] [--arm ARM | --image IMG] [--set KEY=VALUE] [--out DIR]
                                            GEMM kernel probes (fixed-M repeats, M-invariance, FP8 scale
                                            layouts) in an arm's image or as a local process (docs/probes.md)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import secrets
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.gate import GATE_FAILED
from orchestrator.paths import RunPaths, atomic_write_text

USAGE = __doc__ or ""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.strip())
        return 0
    verb, rest = argv[0], argv[1:]
    verbs = {"run": _run, "plan": _plan, "compare": _compare, "reproduce": _reproduce, "clean": _clean,
             "fingerprint": _fingerprint, "probe": _probe}
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


def _plan(argv: list[str]) -> int:
    """Print each arm's equivalent `docker run` command; starts nothing, needs no Docker engine."""
    from orchestrator import config
    from orchestrator.plan import render

    typed = config.to_typed(config.compose(argv))
    config.resolve_prompts(typed.prompts)
    print(render(typed), end="")
    return 0


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt


def _run(argv: list[str]) -> int:
    from orchestrator import config, guard, security

    if any(a in ("-m", "--multirun") for a in argv):
        from orchestrator.sweep import check_parallel_gpus

        check_parallel_gpus(argv)
    elif not any(a.startswith("--") for a in argv):
        # Compose once up front so a typo is one clear line and exit 2, before anything starts.
        typed = config.to_typed(config.compose(argv))
        config.resolve_prompts(typed.prompts)
        guard.enforce_declared(typed)  # a confounded A/B stops here, before any container
        security.enforce(typed, list(typed.runtime.allow), OWN_CONFIG_ALLOW)
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


OWN_CONFIG_ALLOW = "runtime.allow=[{kind}] (in the config, or on the command line as '+runtime.allow=[{kind}]')"


def run_study(cfg: Any) -> int:
    """The Hydra task: one study into Hydra's run dir. Returns the exit status."""
    from hydra.core.hydra_config import HydraConfig

    from orchestrator import config

    try:
        typed = config.to_typed(cfg)
        paths = RunPaths(Path(HydraConfig.get().runtime.output_dir))
        return execute_study(typed, paths, list(typed.runtime.allow), OWN_CONFIG_ALLOW)
    except OrchestratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_status) from None


def execute_study(typed: Any, paths: RunPaths, allow: list[str], how_to_allow: str,
                  extra_meta: dict[str, Any] | None = None) -> int:
    """Checks, the run, the reports, the summary: shared by `run` (Hydra) and `reproduce`."""
    from orchestrator import guard, report, security
    from orchestrator.runtime import make_runtime
    from orchestrator.study import StudyRunner

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the progress
    security.enforce(typed, allow, how_to_allow)
    paths.root.mkdir(parents=True, exist_ok=True)
    run_id = f"{re.sub(r'[^A-Za-z0-9_.-]', '-', paths.root.name)}-{secrets.token_hex(3)}"
    meta: dict[str, Any] = {"study": typed.study.name, "run_id": run_id, "baseline": typed.baseline_arm,
                            "expectations": _expectations(typed), "gate": dataclasses.asdict(typed.gate),
                            **(extra_meta or {})}
    atomic_write_text(paths.meta, json.dumps(meta, indent=2) + "\n")
    declared = guard.declared_check(typed)  # before anything starts (docs/guard.md)
    guard.write(paths, declared=declared)
    for line in guard.warnings(declared):
        print(f"warning: {line}", file=sys.stderr)
    if problems := guard.refusal(declared):
        raise ConfigError(problems)
    runtime = make_runtime(typed.runtime)
    runner = StudyRunner(typed, paths, run_id, runtime)
    try:
        knobs = guard.check_knobs(typed, runtime, run_id)
        guard.write(paths, knobs=knobs)
        if problems := guard.knob_refusal(typed, knobs):
            raise ConfigError(problems)
        runner.run()
    finally:
        runner.cleanup()  # belt and braces: nothing of this run survives, on any engine it used
    print(f"guard: {guard.headline(guard.after_run(typed, paths)).replace('**', '')}", file=sys.stderr)
    result = report.build(paths, **meta)
    _print_summary(paths, result)
    if _gate_failed(result, meta["gate"]):
        return GATE_FAILED
    if runner.failed:
        print(f"error: arm(s) failed: {', '.join(runner.failed)} (see {paths.report_md})", file=sys.stderr)
        return 1
    return 0


def _expectations(typed: Any) -> dict[str, dict[str, Any]]:
    """Prompt id -> its quality expectation (set fields only), kept in run.json for `compare`."""
    out = {}
    for prompt_id, prompt in typed.prompts.prompts.items():
        expect = {k: v for k, v in dataclasses.asdict(prompt.expect).items() if v is not None and k != "min_share"}
        if expect:
            out[prompt_id] = {**expect, "min_share": prompt.expect.min_share}
    return out


def _gate_failed(result: dict[str, Any], gate: dict[str, Any]) -> bool:
    from orchestrator.gate import failures

    problems = failures(result, gate)
    for problem in problems:
        print(f"gate: {problem}", file=sys.stderr)
    return bool(problems)


def _print_summary(paths: RunPaths, result: dict[str, Any]) -> None:
    from orchestrator.report import cells_table

    print(cells_table(result))
    print(f"\nReport: {paths.report_md}\nRecord: {paths.data}")


def _compare(argv: list[str]) -> int:
    from orchestrator import report
    from orchestrator.errors import RecordError

    parser = argparse.ArgumentParser(prog="orchestrator compare", description="Re-make a run's report.")
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="one run, or several compared as one study (arms named RUN_DIR_NAME/ARM)")
    parser.add_argument("--out", type=Path, default=None, help="where the reports go (needed for several runs)")
    parser.add_argument("--baseline", default=None, help="baseline arm (several runs: RUN_DIR_NAME/ARM)")
    parser.add_argument("--json", action="store_true", help="print report.json instead of the table")
    parser.add_argument("--max-divergence-rate", type=float, default=None,
                        help="exit 3 if any cell's divergent/n exceeds this")
    parser.add_argument("--expect-pair", action="append", default=[], metavar="ARM=VERDICT",
                        help="exit 3 unless ARM vs the baseline is VERDICT (identical|differ) in every cell")
    parser.add_argument("--expect-schedule", action="append", default=[], metavar="ARM=VERDICT",
                        help="exit 3 unless ARM's phases compare as VERDICT for every prompt")
    parser.add_argument("--gate", action="store_true", help="also apply the gate the run was configured with")
    args = parser.parse_args(argv)
    sources = [RunPaths(d) for d in args.run_dirs]
    for source in sources:
        if not source.meta.is_file():
            raise RecordError(f"{source.root} is not a run directory (no run.json): pass the folder "
                              "`orchestrator run` printed")
    metas = [json.loads(s.meta.read_text()) for s in sources]
    meta = metas[0]
    if len(sources) > 1:
        if args.out is None:
            raise ConfigError("comparing several runs needs --out DIR for the reports")
        expectations = {k: v for m in metas for k, v in (m.get("expectations") or {}).items()}
        meta = {**meta, "run_id": "+".join(m["run_id"] for m in metas), "expectations": expectations,
                "baseline": args.baseline or f"{sources[0].root.name}/{meta['baseline']}"}
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(RunPaths(args.out).meta, json.dumps({**meta, "sources": [str(s.root) for s in sources]},
                                                               indent=2) + "\n")
    elif args.baseline:
        meta = {**meta, "baseline": args.baseline}
    paths = RunPaths(args.out) if args.out else sources[0]
    result = report.build(paths, **meta, sources=sources)
    if args.json:
        print(paths.report_json.read_text(), end="")
    else:
        _print_summary(paths, result)
    gate = dict(meta.get("gate") or {}) if args.gate else {}
    if args.max_divergence_rate is not None:
        gate["max_divergence_rate"] = args.max_divergence_rate
    for flag, key in ((args.expect_pair, "expect_pairs"), (args.expect_schedule, "expect_schedules")):
        gate[key] = {**gate.get(key, {}), **dict(_arm_verdict(item) for item in flag)}
    return GATE_FAILED if _gate_failed(result, gate) else 0


def _reproduce(argv: list[str]) -> int:
    from orchestrator import reproduce
    from orchestrator.security import KINDS

    parser = argparse.ArgumentParser(prog="orchestrator reproduce",
                                     description="Re-run a run dir with its images pinned and compare signatures.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="the new run dir (default: RUN_DIR/reproduce-<time>)")
    parser.add_argument("--allow", action="append", default=[], choices=KINDS,
                        help="accept this dangerous container option of the (untrusted) config")
    parser.add_argument("--by-tag", action="store_true", help="use the image tags, not the original image ids")
    args = parser.parse_args(argv)
    original = RunPaths(args.run_dir)
    typed = reproduce.load_config(original)
    if not args.by_tag:
        pinned = reproduce.pin_images(typed, original)
        reproduce.check_images_present(typed, pinned, original)
    new = RunPaths(args.out or reproduce.default_out(original))
    status = execute_study(typed, new, args.allow, reproduce.REPRODUCE_ALLOW,
                           extra_meta={"reproduces": str(original.root)})
    cells = reproduce.verdicts(original, new)
    for cell in cells:
        where = f", first differing token {cell['first_differing_token']}" if cell.get("first_differing_token") \
            is not None else ""
        print(f"{cell['verdict']:10s} {cell['arm']}/{cell['prompt_id']}/{cell['phase']}: {cell['detail']}{where}")
    if reproduce.write_verdict(new, original, cells):
        print(f"verdict: reproduced ({len(cells)} cells)")
        return status
    print(f"verdict: differs ({sum(c['verdict'] != 'reproduced' for c in cells)} of {len(cells)} cells)")
    return GATE_FAILED


def _arm_verdict(item: str) -> tuple[str, str]:
    arm, _, verdict = item.partition("=")
    if verdict not in ("identical", "differ"):
        raise ConfigError(f"'{item}': expected ARM=identical or ARM=differ")
    return arm, verdict


def _fingerprint(argv: list[str]) -> int:
    from orchestrator import fingerprint

    parser = argparse.ArgumentParser(prog="orchestrator fingerprint",
                                     description="Fingerprint this host, or an image, and print its matrix key. "
                                                 "No network calls.")
    parser.add_argument("--image", help="fingerprint inside a throwaway container of this image (no network)")
    parser.add_argument("--json", action="store_true", help="one JSON object for machines")
    parser.add_argument("--docker-host", default=None)
    args = parser.parse_args(argv)
    result = fingerprint.fingerprint_target(args.image, args.docker_host)
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else fingerprint.render(result))
    return 0 if not result["fingerprint"].get("probe", {}).get("error") else 1


def _probe(argv: list[str]) -> int:
    from orchestrator import probe_runner

    return probe_runner.main(argv)


def _clean(argv: list[str]) -> int:
    from orchestrator.runtime.base import LABEL_NS
    from orchestrator.runtime.docker import DockerRuntime

    parser = argparse.ArgumentParser(prog="orchestrator clean",
                                     description="Remove containers left by crashed runs.")
    parser.add_argument("--run", help="only this run id (default: every orchestrator container)")
    parser.add_argument("--docker-host", default=None)
    parser.add_argument("--runtime", choices=("docker", "process"), default="docker",
                        help="process: kill local server processes a killed run left (docs/runtimes.md)")
    args = parser.parse_args(argv)
    labels = {f"{LABEL_NS}.run": args.run or ""}
    if args.runtime == "process":
        from orchestrator.runtime.process import ProcessRuntime

        removed = ProcessRuntime().cleanup(labels)
        print(f"removed {len(removed)} process(es){': ' + ', '.join(removed) if removed else ''}")
        return 0
    removed = DockerRuntime(args.docker_host).cleanup(labels)
    print(f"removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}")
    return 0
