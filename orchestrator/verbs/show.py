"""`orchestrator show RUN_DIR [--cell ARM/PROMPT/PHASE]`: a run's verdict, the lines report.md opens with, its
environment and the cells that diverged; `--cell`: where one cell split (report/listing.py). A missing folder
or report: RecordError, exit 2."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome, answer
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.report.listing import show, show_cell
    from orchestrator.reproduce.bundle import opened

    made = parser("show", "A run's verdict, the lines report.md opens with, its environment and the cells that "
                  "diverged; --cell: where one cell split.")
    made.add_argument("run_dir", type=Path)
    made.add_argument("--cell", metavar="ARM/PROMPT/PHASE", help="where this cell's completions split")
    args = made.parse_args(argv)
    args.run_dir = opened(args.run_dir)[0]  # a bundle: its run dir, checked and unpacked
    if args.cell is None:
        return answer(show(args.run_dir))
    return answer(show_cell(args.run_dir, args.cell))  # --cell "" names no cell: show_cell says which there are
