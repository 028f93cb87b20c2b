"""`orchestrator ls [DIR]`: every run below DIR (default runs): study, started, arms, verdict, path
(report/listing.py)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome, answer
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.report.listing import render_runs, runs

    made = parser("ls", "Every run below DIR: study, started, arms, verdict, path.")
    made.add_argument("dir", type=Path, nargs="?", default=Path("runs"), help="default: runs")
    return answer(render_runs(runs(made.parse_args(argv).dir)))
