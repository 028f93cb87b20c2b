"""`orchestrator reproduce RUN_DIR`: the study re-run with its images pinned by id, a verdict per cell
(reproduce/rerun.py)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome
from orchestrator.verbs.arguments import parser, rerun_options


def main(argv: list[str]) -> Outcome:
    from orchestrator.reproduce.rerun import reproduce

    made = parser("reproduce", "Re-run a run dir with its images pinned and compare signatures.")
    made.add_argument("run_dir", type=Path)
    made.add_argument("--by-tag", action="store_true", help="use the image tags, not the original image ids")
    args = rerun_options(made).parse_intermixed_args(argv)
    return reproduce(args.run_dir, args.out, args.allow, args.by_tag, args.output)
