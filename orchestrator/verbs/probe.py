"""`orchestrator probe [--preset NAME]`: GEMM or ops kernel probes in an arm's image or as a local process
(run/kernel_probes.py), recorded with RUN/probes.md; 3 when an op expected invariant was not
(`analysis.probes.gate_failures`). `--script FILE`: a user's own script instead (run/script_probe.py), recorded
with RUN/script.md; 4 when it exited non-zero. docs/probes.md"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.console import Outcome, answer, note
from orchestrator.errors import ExitStatus
from orchestrator.verbs.arguments import parser

if TYPE_CHECKING:
    from argparse import Namespace


def main(argv: list[str]) -> Outcome:
    from orchestrator.analysis.probes import gate_failures
    from orchestrator.config import search
    from orchestrator.config.probe import presets
    from orchestrator.report.probes import render_markdown
    from orchestrator.run.kernel_probes import probe, probe_config, probe_runtime

    made = parser("probe", docker_host=True, description="Kernel probes, GEMM or ops (docs/probes.md).")
    made.add_argument("--preset", default="cpu_small", help=f"conf/probe/NAME or YAML ({', '.join(presets())})")
    made.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset key")
    made.add_argument("--local", action="store_true",
                      help="run as a local process (hosts without Docker): under --arm's interpreter, else this one")
    made.add_argument("--image", help="run in a container of this image (overrides the preset)")
    made.add_argument("--arm", help="run as the arm ARM ran (an arm of the study in --out) or runs (conf/arm, "
                      "DIR/arm of a --config-dir): its image and gpus, or as a process its interpreter and code")
    made.add_argument("--out", type=Path, help="run directory (default runs/probes/PRESET-TIME)")
    made.add_argument("--ingest", type=Path, nargs="+", metavar="RAW", help="record these raw JSONL outputs")
    made.add_argument("--print-spec", action="store_true", help="print the JSON spec for the probe and exit")
    made.add_argument("--script", type=Path, help="run this Python script of yours, unmodified, where --arm runs "
                      "(docs/probes.md: Your own script); its digest lines are recorded")
    made.add_argument("--repeats", type=int, help="runs of --script (default 3), or the kernel probe's repeats")
    made.add_argument("--contend", choices=("process", "stream"),
                      help="a second process (or, on a GPU, CUDA stream) busy on the same device while it repeats")
    made.add_argument("--timeout-s", type=float, default=600.0, help="per run of --script (default 600)")
    dirs, rest = search.split_config_dirs(argv)  # --config-dir DIR: where --arm is found
    a = made.parse_args(rest)
    if a.script:
        return script(a, dirs)
    sets = [*a.set, *([f"repeats={a.repeats}"] if a.repeats else []), *([f"contend={a.contend}"] if a.contend else [])]
    config = probe_config(a.preset, sets, a.arm, a.image, dirs, a.out)
    if a.print_spec:
        return answer(json.dumps(config.spec()))
    local = a.local or bool(config.of_arm and config.of_arm.on_host)  # a study's process arm runs as one
    run = probe(config, probe_runtime(local or bool(a.ingest), a.docker_host), a.out, local, a.ingest)
    failed = gate_failures(run.rows)
    return (answer(render_markdown(run.rows),
                   f"Record: {run.paths.table('probes')}\nReport: {run.paths.root / 'probes.md'}")
            + note(*(f"GATE: {line}" for line in failed), status=ExitStatus.GATE_FAILED if failed else ExitStatus.OK))


def script(a: Namespace, dirs: list[Path]) -> Outcome:
    """`--script FILE`: the script run unmodified where the arm (or --image, or this interpreter) runs."""
    from orchestrator.config.probe import load_probe_config
    from orchestrator.report.script_probe import render_script
    from orchestrator.run.kernel_probes import probe_runtime, study_arm
    from orchestrator.run.script_probe import check_options, read_script, run_script

    given = read_script(a.script)
    repeats = 3 if a.repeats is None else a.repeats
    check_options(repeats, a.contend)
    config = load_probe_config(None, [], (study_arm(a.out, a.arm) or a.arm) if a.arm else None, a.image, dirs)
    local = a.local or bool(config.of_arm and config.of_arm.on_host)
    run = run_script(given, config, probe_runtime(local, a.docker_host), local, repeats, a.contend, a.timeout_s,
                     a.out)
    failed = [r for r in run.rows if r["exit_code"] != 0]
    return (answer(render_script(run.rows), f"Record: {run.paths.table('scripts')}\n"
                   f"Report: {run.paths.root / 'script.md'}")
            + note(*([f"the script exited non-zero in {len(failed)} of {len(run.rows)} runs (their stderr is in "
                      "the report)"] if failed else []),
                   status=ExitStatus.MEASUREMENT_FAILED if failed else ExitStatus.OK))
