"""What a reader of another tool's output hands the writer: its answers, one per response, each with the bytes the
source held for it, and the columns the source cannot fill (said in run.json and by `import`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.engines import ParsedCompletion
from orchestrator.errors import UsageError

KINDS = ("detllm", "openai-json", "position-parity")


@dataclass(frozen=True)
class Answer:
    """One response of the source: its cell (arm, prompt, phase), its place in it, and what it parsed to."""

    arm: str
    prompt_id: str
    prompt_sha256: str | None
    phase: str
    repeat: int
    request_json: str | None  # the request as the source recorded it; None: not recorded
    body: bytes  # the source's own bytes for this answer (a JSON file, a trace line), verbatim
    parsed: ParsedCompletion
    prompt_chars: int | None = None
    phase_kind: str = "sequential"  # the source's word for how they were sent; "sequential" when it says none


@dataclass(frozen=True)
class Evidence:
    tool: str  # as its authors spell it: detLLM
    version: str | None  # the tool's version its files name; None: they name none
    kind: str  # one of KINDS
    study: str
    baseline: str
    arms: dict[str, dict[str, Any]]  # arm -> what the source says of how it ran (its config)
    answers: list[Answer]
    prompts: dict[str, dict[str, Any]]  # prompt_id -> {text (None: the source keeps none), sha256}
    lacks: tuple[str, ...]  # what the source does not hold, in words ("no top-k logprobs", ...)
    notes: tuple[str, ...] = field(default=())  # how it was read (grouping, a stripped prompt prefix)


def bad(path: Path, problem: str, fix: str) -> UsageError:
    """A malformed source: one line naming the file, the problem and what to do (exit 2)."""
    return UsageError(f"{path}: {problem}; {fix}")


def digest(source: Path) -> str:
    """sha256 of a file; of a folder, sha256 over its files' `sha256  relative/path` lines, sorted (as `sha256sum`
    prints them), so a folder copied elsewhere keeps its digest."""
    if source.is_file():
        return hashlib.sha256(source.read_bytes()).hexdigest()
    lines = sorted(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(source).as_posix()}\n"
                   for p in source.rglob("*") if p.is_file())
    return hashlib.sha256("".join(lines).encode()).hexdigest()
