"""`orchestrator bundle RUN_DIR [--out FILE]`: the run, its arms' build contexts and checksums in one file that
`run --from`, `reproduce` and `compare` take as they take a run dir (reproduce/bundle.py)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.reproduce.bundle import bundle

    made = parser("bundle", "Write a run, its arms' build contexts and checksums into one file to hand on.")
    made.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    made.add_argument("--out", type=Path, default=None, help="the bundle's file (default: RUN_DIR.bundle.zip beside "
                      "the run dir)")
    args = made.parse_args(argv)
    return bundle(args.run_dir, args.out)
