"""`orchestrator locate RUN --cell ARM/PROMPT/PHASE [--against PHASE] [--probe]`: where inside the model a
cell's two requests first split (analysis/locate.py), as text (report/locate.py); `--probe` runs the op probe at
that module's shapes in the arm's image or interpreter, through `orchestrator probe`'s machinery
(run/kernel_probes.py: the rows land in RUN's probes table and RUN/probes.md), and adds its verdict
(analysis/locate_probe.py). docs/locate.md"""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome, answer, note
from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.analysis.locate import locate
    from orchestrator.analysis.locate_probe import probe_verdict
    from orchestrator.report.locate import render
    from orchestrator.reproduce.bundle import opened
    from orchestrator.run.kernel_probes import probe, probe_config, probe_runtime

    made = parser("locate", docker_host=True, description="Where inside the model a cell's two requests first "
                  "split, from the digests a hooked engine recorded (docs/locate.md).")
    made.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    made.add_argument("--cell", required=True, metavar="ARM/PROMPT/PHASE", help="the cell (`orchestrator show RUN` "
                      "lists those that diverged)")
    made.add_argument("--against", metavar="PHASE", help="compare a request of the cell against one of this phase "
                      "(default: the cell's two branches; one signature: the first sequential phase)")
    made.add_argument("--probe", action="store_true", help="run the op probe at the split's shapes in the arm's "
                      "image or interpreter and add its verdict (its rows go to RUN's probes table)")
    args = made.parse_args(argv)
    args.run_dir = opened(args.run_dir)[0]  # a bundle: its run dir, checked and unpacked (--probe's rows go there)
    if not RunPaths(args.run_dir).meta.is_file():
        raise RecordError(f"{args.run_dir} is not a run directory (no run.json): pass a folder that `orchestrator "
                          "run` wrote; `orchestrator ls` lists them")
    located = locate(RunPaths(args.run_dir), args.cell, args.against)
    if not args.probe:
        return answer(render(located))
    if located.probe is None:
        why = "the op probe does not apply to this split (above)" if located.no_probe else \
            "no op probe matches the first difference" if located.difference else "identical digests, no split"
        return answer(render(located)) + note(f"--probe: {why}; nothing ran")
    ask = located.probe  # the probe as its command runs it: in the study's arm (its image, or its interpreter)
    config = probe_config(ask.preset, ask.sets, ask.arm, None, [], args.run_dir)
    local = bool(config.of_arm and config.of_arm.on_host)
    located.verdict = probe_verdict(probe(config, probe_runtime(local, args.docker_host), args.run_dir,
                                                   local, None).rows)
    return answer(render(located))
