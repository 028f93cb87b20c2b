"""One exception tree for the orchestrator. Every message says what went wrong and what to do.

    OrchestratorError                 exit status 1 unless stated
    ├── ConfigError                   bad config: unknown key, wrong type, missing file (exit 2)
    ├── RuntimeFailure                the container runtime failed
    │   ├── EngineUnavailable         no Docker engine / no such runtime reachable
    │   ├── ImageError                image missing and not buildable, or build failed
    │   └── ArmStartError             container exited or never became ready (carries log tail)
    ├── ProtocolFailure               the server misbehaved in a way that stops the arm
    └── RecordError                   a run directory / Parquet record is missing or unreadable
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class OrchestratorError(Exception):
    exit_status = 1


class ConfigError(OrchestratorError):
    exit_status = 2

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class RuntimeFailure(OrchestratorError):
    pass


class EngineUnavailable(RuntimeFailure):
    pass


class ImageError(RuntimeFailure):
    pass


class ArmStartError(RuntimeFailure):
    def __init__(self, message: str, log_tail: list[str] | None = None) -> None:
        self.log_tail = log_tail or []
        tail = "\n".join(f"    {line}" for line in self.log_tail)
        super().__init__(f"{message}\n  last {len(self.log_tail)} log lines:\n{tail}" if tail else message)


class ProtocolFailure(OrchestratorError):
    pass


class RecordError(OrchestratorError):
    pass


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' Did you mean 'x'? Available: a, b, c' — the tail of every 'unknown X' message."""
    options = sorted(set(choices))
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"{hint} Available: {', '.join(options) if options else '(none)'}"
