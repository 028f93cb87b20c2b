"""The verbs' options, parsed in one way: argparse, one line and exit 2 for a bad one (`UsageError`), and the
options several verbs share (the Docker host, a recorded run's new run dir and its --allow)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from orchestrator.config.search import CommandLine
from orchestrator.errors import UsageError
from orchestrator.runtime.spec import Runtime


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage and exits)
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def parser(verb: str, description: str, docker_host: bool = False) -> argparse.ArgumentParser:
    made = _Parser(prog=f"orchestrator {verb}", description=description, allow_abbrev=False)
    if docker_host:
        made.add_argument("--docker-host", default=None, help="the Docker host (default: DOCKER_HOST)")
    return made


def rerun_options(made: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A run dir's study again: someone else's config, so its dangerous options need --allow here."""
    from orchestrator.config.security import KINDS

    made.add_argument("--out", type=Path, default=None, help="the new run dir")
    made.add_argument("output", nargs="*", metavar="hydra.run.dir=DIR",
                      help="or Hydra's hydra.run.dir=DIR, or hydra.sweep.dir=DIR hydra.sweep.subdir=NAME")
    made.add_argument("--allow", action="append", default=[], choices=KINDS, help="accept this dangerous option")
    return made


def hydra_line(verb: str, argv: list[str], *flags: str) -> CommandLine:
    """A Hydra command line (`run`, `check`, `plan`): config dirs, overrides, and only the flags the verb takes."""
    line = CommandLine.parse(argv)
    line.only(verb, *flags)
    return line


def asks_help(argv: list[str]) -> bool:
    """`check --help`, `plan -h`: a Hydra verb's own usage (`run --help` is Hydra's)."""
    return bool(set(argv) & {"-h", "--help"})


def runtime_named(kind: str, docker_host: str | None) -> Runtime:
    from orchestrator.config.arms import runtime_named as named

    made: Runtime = named(kind, docker_host)
    return made
