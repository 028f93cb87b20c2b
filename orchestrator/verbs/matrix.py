"""`orchestrator matrix RUN_DIR... [--out OUT]`: the support matrix of run dirs from any machines, merged by the
seed's cell (report/matrix.py): matrix.md, matrix.html, matrix.json, matrix.csv; an onset search's sweep dir gives
its jobs' run dirs (report/matrix_sources.py). A folder that is no run dir: RecordError, exit 2."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome, answer
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.report.matrix import write
    from orchestrator.reproduce.bundle import opened

    made = parser("matrix", "Merge run dirs (from any machines) into one support matrix: a row per cell "
                  "(model, engine, runtime, quantization, topology, hardware, flags, load point) and run.")
    made.add_argument("run_dirs", type=Path, nargs="*", metavar="RUN_DIR",
                      help="run dirs, or onset searches' sweep dirs (their jobs), in any order")
    made.add_argument("--out", type=Path, default=Path("matrix"), help="where the pages go (default: ./matrix)")
    args = made.parse_args(argv)
    rows = write([opened(path)[0] for path in args.run_dirs], args.out)  # a bundle: its run dir, unpacked
    twice = sum(len(row.measurements) > 1 for row in rows)
    differ = sum(row.agreement == "differ" for row in rows)
    return answer(f"{len(rows)} cells, {twice} measured more than once ({differ} differ): "
                  f"{args.out / 'matrix.md'}, matrix.html, matrix.json, matrix.csv")
