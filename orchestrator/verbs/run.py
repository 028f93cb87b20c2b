"""`orchestrator run [HYDRA OVERRIDES...]` (-m: a sweep; sweep/app.py), `run --from RUN_DIR` (the study a run dir
recorded, into a new run dir) and `run --resume RUN_DIR` (finish it in place; reproduce/)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.search import CommandLine
from orchestrator.console import Outcome
from orchestrator.verbs.arguments import parser, rerun_options


def main(argv: list[str]) -> Outcome:
    if argv[:1] not in (["--from"], ["--resume"]):
        from orchestrator.sweep.app import run_with_hydra

        return run_with_hydra(CommandLine.parse(argv))  # every Hydra flag is run's: --cfg, --help, -m, ...
    from orchestrator.reproduce.rerun import run_from
    from orchestrator.reproduce.resume import resume

    made = parser("run", "Run the study a run dir recorded (--from: into a new run dir; --resume: finish it)")
    made.add_argument(argv[0], dest="run_dir", type=Path, required=True, metavar="RUN_DIR")
    args = rerun_options(made).parse_intermixed_args(argv)
    if argv[0] == "--resume" and (args.output or args.out):
        made.error(f"--resume finishes {args.run_dir} in place: it takes no --out, no hydra.run.dir")
    if argv[0] == "--resume" and args.run_dir.is_file():
        made.error(f"--resume finishes a run dir in place, and {args.run_dir} is a file (a bundle?): re-run it with "
                   "--from")
    return (resume(args.run_dir, args.allow) if argv[0] == "--resume"
            else run_from(args.run_dir, args.out, args.allow, args.output))
