"""`orchestrator claims FILE [--study NAME [OVERRIDES...]] [--run RUN_DIR...] [--out DIR]`: each claim of a claims
file answered replicated, contradicted or inconclusive, with its power (sweep/claims.py); exit 3 when one is
contradicted (docs/claims.md)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.search import CommandLine
from orchestrator.console import Outcome
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.reproduce.bundle import opened
    from orchestrator.sweep.claims import check_claims

    made = parser("claims", "Check a claims file's claims on a study run here (sized so each could be "
                  "contradicted) and/or on run dirs: replicated, contradicted or inconclusive, with the power.")
    made.add_argument("given", nargs="+", metavar="FILE", help="the claims file (YAML, docs/claims.md), "
                      "then any Hydra overrides of the study, as `run`'s")
    made.add_argument("--study", default=None, help="the study preset to run for what the run dirs lack "
                      "(default: the file's `study:` when no --run is given)")
    made.add_argument("--run", dest="run_dirs", nargs="+", default=[], metavar="RUN_DIR",
                      help="run dirs to check the claims on (any the record reader reads)")
    made.add_argument("--out", type=Path, default=None, help="where the page and any run go (default: "
                      "./claims/FILE_STEM)")
    made.add_argument("--config-dir", action="append", default=[], help="a config dir of your own (as `run`'s)")
    made.usage = ("orchestrator claims FILE [--study NAME] [--run RUN_DIR...] [--out DIR] [--config-dir DIR] "
                  "[OVERRIDE...]")
    args = made.parse_intermixed_args(argv)
    # `--run A B key=value`: its nargs takes the overrides after the run dirs too; an override names no folder
    overrides = [arg for arg in args.run_dirs if _override(arg)]
    run_dirs = [opened(Path(arg))[0] for arg in args.run_dirs if arg not in overrides]  # a bundle: unpacked
    line = CommandLine.parse([*(arg for d in args.config_dir for arg in ("--config-dir", d)), *args.given[1:],
                              *overrides])
    return check_claims(Path(args.given[0]), args.study, line, run_dirs, args.out)


def _override(arg: str) -> bool:
    """A Hydra override (key=value, +key=value, ~key) rather than a run dir."""
    return not Path(arg).exists() and ("=" in arg or arg.startswith("~"))
