"""Where a verb's outcome becomes terminal output and an exit status. A stage returns an `Outcome` (its answer
for stdout, its notes for stderr, the statuses that apply); `finish` prints it and picks the status by the
precedence of docs/conventions.md (`errors.worst`); `failed` is the outcome of an exception a verb raised.

Progress while a run goes (the bars of run/progress.py, the `[arm] ...` lines of run/study.py, on stderr) is
printed where it happens: it is not an outcome, and a reader of stdout never sees it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from orchestrator.errors import ExitStatus, OrchestratorError, worst


@dataclass(frozen=True)
class Outcome:
    """What a verb (or a sweep's job) ends with: its lines in the order they are said, and its statuses."""

    lines: tuple[tuple[str, bool], ...] = ()  # (text, on stderr): stdout is the answer a pipe reads
    statuses: tuple[int, ...] = ()  # every status that applies; none: ok

    @property
    def status(self) -> int:
        return worst(*self.statuses)

    @property
    def out(self) -> list[str]:
        return [text for text, err in self.lines if not err]

    @property
    def notes(self) -> list[str]:
        return [text for text, err in self.lines if err]

    def __add__(self, other: Outcome) -> Outcome:
        return Outcome(self.lines + other.lines, self.statuses + other.statuses)


def answer(*lines: str, status: int = ExitStatus.OK) -> Outcome:
    """Lines on stdout."""
    return Outcome(tuple((line, False) for line in lines), (status,))


def note(*lines: str, status: int = ExitStatus.OK) -> Outcome:
    """Lines on stderr: warnings, errors, where things are."""
    return Outcome(tuple((line, True) for line in lines), (status,))


def finish(outcome: Outcome) -> int:
    """Print the outcome's lines in order and return its status."""
    for text, err in outcome.lines:
        if err:  # in the order said, on a terminal that shows both
            sys.stdout.flush()
        print(text, file=sys.stderr if err else sys.stdout, flush=err)
    return outcome.status


def failed(exc: BaseException) -> Outcome:
    """What an exception ends a verb with: every problem of a config one `error:` line each (exit 2, 4, ...);
    an interrupt says what was cleaned up and how to finish (130); anything else is a bug (1)."""
    if isinstance(exc, OrchestratorError):
        return note(*(f"error: {problem}" for problem in getattr(exc, "problems", [str(exc)])),
                    status=exc.exit_status)
    if isinstance(exc, KeyboardInterrupt):
        return note("interrupted: this run's containers and processes were stopped and removed",
                    *(f"interrupted: {n}" for n in getattr(exc, "__notes__", [])),  # what a run kept, how to finish
                    status=ExitStatus.INTERRUPTED)
    return note(f"internal error (a bug in the orchestrator): {type(exc).__name__}: {exc}; re-run with --debug for "
                "the traceback", status=ExitStatus.INTERNAL)
