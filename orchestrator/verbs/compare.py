"""`orchestrator compare RUN_DIR... [--gate] [--export aiperf]`: the reports re-made from the record
(report/verdict.py; a bundle is checked and unpacked first, reproduce/bundle.py), and the load phases as AIPerf's
profile export if asked (report/aiperf_export.py); exit 3 on a failed gate."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.report.aiperf_export import FORMATS
    from orchestrator.report.verdict import recompare
    from orchestrator.reproduce.bundle import opened

    made = parser("compare", "Re-make a run's report.")
    made.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                      help="one run (or its bundle), or several as one study")
    made.add_argument("--out", type=Path, default=None, help="where the reports go (needed for several runs)")
    made.add_argument("--baseline", default=None, help="baseline arm (several runs: RUN_DIR_NAME/ARM)")
    made.add_argument("--json", action="store_true", help="print report.json instead of the table")
    made.add_argument("--max-divergence-rate", type=float, help="exit 3 if a cell's divergent/n exceeds this")
    made.add_argument("--expect-pair", action="append", default=[], help="ARM=identical|agree|differ vs baseline")
    made.add_argument("--expect-schedule", action="append", default=[], help="ARM=identical|agree|differ, phases")
    made.add_argument("--gate", action="store_true", help="also apply the gate the run was configured with")
    made.add_argument("--branches", type=int, help="explorer: branches shown per divergent cell (default: the "
                      "run's study.explorer_branches, 4)")
    made.add_argument("--export", choices=FORMATS, help="also write the load phases in this tool's format: aiperf, "
                      "AIPerf's profile export per arm and load point under OUT/aiperf/ (docs/load.md)")
    a = made.parse_args(argv)
    a.run_dirs = [opened(path)[0] for path in a.run_dirs]  # a bundle: its run dir, checked and unpacked
    return recompare(a.run_dirs, a.out, a.baseline, a.json, a.gate, a.max_divergence_rate, a.expect_pair,
                     a.expect_schedule, a.branches, a.export)
