"""One exception tree for the orchestrator, the exit statuses every verb uses, and the words every message
and report shares (did_you_mean, noun, counted, ordinal). Every message says what went wrong and what to do.

    OrchestratorError                 exit status 1 unless stated
    ├── ConfigError                   bad config: unknown key, wrong type, missing file (exit 2)
    ├── RuntimeFailure                the container runtime failed (exit 4)
    │   ├── DockerUnavailable         no Docker host reachable (DOCKER_HOST, runtime.docker_host)
    │   ├── ImageError                image missing and not buildable, or build failed
    │   └── ArmStartError             container exited or never became ready (carries log tail)
    ├── EngineFailure                 the engine died mid-protocol or answered nothing (exit 4)
    ├── RecordError                   a run directory / Parquet record is missing or unreadable (exit 2)
    ├── RecordWriteError              the record could not be written mid-run: disk full, folder gone (exit 4)
    └── UsageError                    a verb or flag the command line does not take (exit 2)
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import IntEnum


class ExitStatus(IntEnum):
    """The exit statuses of every verb (docs/conventions.md)."""

    OK = 0
    INTERNAL = 1  # a bug in the orchestrator
    BAD_INPUT = 2  # config, command line, files, run dir: nothing was started
    GATE_FAILED = 3  # the measurement worked and a gate failed
    MEASUREMENT_FAILED = 4  # an arm did not start, its engine died, or it got no successful response
    INTERRUPTED = 130  # Ctrl-C / SIGTERM, cleanup done


# What each status means and what to do, for the docs (docs/errors.md is generated from this module and
# config/catalog.py).
MEANINGS = {
    ExitStatus.OK: ("ran, and every gate that was asked for passed", "-"),
    ExitStatus.INTERNAL: ("a bug in the orchestrator; the one line says so", "re-run with --debug and report the "
                          "traceback"),
    ExitStatus.BAD_INPUT: ("bad input: config, command line, files, run dir; nothing was started or changed",
                           "fix what the line names (the catalog below)"),
    ExitStatus.GATE_FAILED: ("the measurement worked and a gate failed (e.g. divergence above the allowed rate)",
                             "read the report: the gate's lines name the cell"),
    ExitStatus.MEASUREMENT_FAILED: ("the measurement failed: an arm did not start, its engine died, or an arm got "
                                    "no successful response", "the report's Failures section names the root cause "
                                    "from the engine's log"),
    ExitStatus.INTERRUPTED: ("interrupted (Ctrl-C, SIGTERM); containers and processes were cleaned up; `compare`"
                             " of an interrupted run", "`orchestrator run --resume RUN` sends the rest (the "
                             "line names RUN)"),
}

# Where several apply (a sweep, a study of many arms), the worst wins, in this order.
PRECEDENCE = (ExitStatus.INTERRUPTED, ExitStatus.INTERNAL, ExitStatus.BAD_INPUT, ExitStatus.MEASUREMENT_FAILED,
               ExitStatus.GATE_FAILED, ExitStatus.OK)


def worst(*statuses: int) -> int:
    """The status that wins by precedence: 130 > 1 > 2 > 4 > 3 > 0 (an unknown status counts as 1)."""
    known = [ExitStatus(s) if s in ExitStatus._value2member_map_ else ExitStatus.INTERNAL for s in statuses]
    return int(min(known, key=PRECEDENCE.index, default=ExitStatus.OK))


class OrchestratorError(Exception):
    exit_status = 1


class ConfigError(OrchestratorError):
    exit_status = 2

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class RuntimeFailure(OrchestratorError):
    exit_status = 4  # the measurement could not be made


class DockerUnavailable(RuntimeFailure):
    """No Docker daemon answers at the host named ("engine" is kept for the LLM serving engines)."""


class ImageError(RuntimeFailure):
    def __init__(self, message: str, absent: str | None = None) -> None:
        self.absent = absent  # the image is not on the Docker host: that sentence, with the closest image it has
        super().__init__(message)


class ArmStartError(RuntimeFailure):
    def __init__(self, message: str, log_tail: list[str] | None = None) -> None:
        self.log_tail = log_tail or []
        tail = "\n".join(f"    {line}" for line in self.log_tail)
        super().__init__(f"{message}\n  last {len(self.log_tail)} log lines:\n{tail}" if tail else message)


class EngineFailure(OrchestratorError):
    """The engine died mid-protocol, or answered no request of an arm successfully."""

    exit_status = 4


class RecordError(OrchestratorError):
    exit_status = 2


class RecordWriteError(OrchestratorError):
    exit_status = 4  # the measurement could not be kept


class UsageError(OrchestratorError):
    exit_status = 2


# A load point with fewer distinct prompts than requests in flight: what it risks, said by `check` and the report
# alike (an engine without a prefix cache is not served from it).
FEW_PROMPTS = "an engine with a prefix cache could serve most of them from prompts it has seen"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' Did you mean 'x'? Available: a, b, c' — the tail of every 'unknown X' message."""
    options = sorted(set(choices))
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"{hint} Available: {', '.join(options) if options else '(none)'}"


def noun(n: int, singular: str, plural: str | None = None) -> str:
    """The noun for n things, as a list of them follows it ('batch 3', 'batches 3, 5'); `plural` where adding
    an s is wrong."""
    return singular if n == 1 else plural or singular + "s"


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """'1 cell', '3 cells', '1 batch', '2 batches': a count and its noun agree in every message and report
    line."""
    return f"{n} {noun(n, singular, plural)}"


def ordinal(n: int) -> str:
    """'1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '102nd'."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
