"""Why an arm failed, from the record alone: where its engine died (the first request of the trailing
run of failures) and the root cause in its log (the first traceback or ERROR block after the last
successful response, or from the start when it never answered)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.record.recorded import RecordedRun

TRACEBACK = "Traceback (most recent call last)"
ERROR_LEVEL = re.compile(r"\b(ERROR|FATAL|CRITICAL)\b")
ROUTINE = re.compile(r"\b(INFO|WARNING|DEBUG)\b")
EXCEPTION_LINE = re.compile(r"^\s*[\w.]+(Error|Exception|Exit)\b")  # a bare traceback's last line


def is_root_cause(text: str) -> bool:
    """A traceback, a line logged at ERROR level, or an exception line that no routine level prefixes (a
    WARNING that merely mentions `OSError` is not one)."""
    return TRACEBACK in text or bool(ERROR_LEVEL.search(text)) or (
        not ROUTINE.search(text) and bool(EXCEPTION_LINE.match(text)))
MAX_LINES = 40
RAISED = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit): .+")  # "NotImplementedError: No ... backend"
POINTER = re.compile(r"root cause|stack trace \(above\)|see above", re.IGNORECASE)  # a wrapper, not the cause


@dataclass
class ArmFailure:
    arm: str
    status: str
    error: str | None  # what the run said (first line: the reason)
    requests: int
    failed_requests: int
    died_at: str | None = None  # "request 3 of 40 (sequential/capital #2): HTTP 500 ..."
    root_cause: list[str] = field(default_factory=list)  # log lines (a long block: its start and its end)
    cause: str | None = None  # the root cause in one line, from the whole block (`cause_line`)


def _ns(timestamp: str) -> int | None:
    """RFC 3339 with nanoseconds (Docker) or microseconds (processes) -> epoch ns."""
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", timestamp)
    if not match:
        return None
    seconds = datetime.fromisoformat(match.group(1) + "+00:00").timestamp()
    return int(seconds) * 10**9 + int((match.group(2) or "0").ljust(9, "0")[:9])


def root_cause(lines: list[tuple[str, str]], after_ns: int | None) -> list[str]:
    """The first traceback or ERROR block at or after `after_ns`, shortened to its start and its end."""
    return shortened(error_block(lines, after_ns))


def error_block(lines: list[tuple[str, str]], after_ns: int | None) -> list[str]:
    """The first traceback or ERROR block at or after `after_ns`: (timestamp, text) lines in log order."""
    start = None
    for index, (stamp, text) in enumerate(lines):
        at = _ns(stamp)
        if (after_ns is None or at is None or at >= after_ns) and is_root_cause(text):
            start = index
            break
    if start is None:
        return []
    block = [lines[start][1]]
    for _, text in lines[start + 1:]:
        if ROUTINE.search(text) and not is_root_cause(text):
            break  # the engine went back to routine lines: the block is over
        block.append(text)
    return block


def shortened(block: list[str]) -> list[str]:
    if len(block) <= MAX_LINES:
        return block
    # Where it started and how it ended (the exception lines come last), without the frames between.
    return [*block[:8], f"... ({len(block) - 38} lines) ...", *block[-30:]]


def cause_line(block: list[str]) -> str | None:
    """The root cause in one line, for the terminal: the first exception raised in the block (chained ones
    follow their cause) that is not a wrapper pointing back at it ("See root cause above"), else the block's
    first line."""
    for text in block:
        if (match := RAISED.search(text)) and not POINTER.search(text):
            return match.group(0).strip()
    return block[0].strip() if block else None


def arm_failures(run: RecordedRun) -> list[ArmFailure]:
    """Every arm that failed or got no successful response, with where and why (named as the run's label says)."""
    responses = run.reads.ledger().select(["arm", "phase", "prompt_id", "request_index", "error", "http_status",
                                           "send_ns", "recv_ns"]).to_pylist()
    failures = []
    logs: list[dict[str, object]] | None = None
    for arm in run.starts:
        rows = sorted((r for r in responses if r["arm"] == arm.arm), key=lambda r: r["send_ns"] or 0)
        failed = [r for r in rows if r["error"] is not None]
        if arm.status == "completed" and rows and len(failed) < len(rows):  # no rows: no answer either
            continue
        ok = [r for r in rows if r["error"] is None]
        trailing = rows[len(rows) - next((i for i, r in enumerate(reversed(rows)) if r["error"] is None), len(rows)):]
        failure = ArmFailure(run.label + arm.arm, arm.status or "", arm.error, len(rows), len(failed))
        if trailing:
            first = trailing[0]
            index = rows.index(first) + 1
            failure.died_at = (f"request {index} of {len(rows)} ({first['phase']}/{first['prompt_id']} "
                               f"#{first['request_index']}): {first['error']}")
        if logs is None:
            logs = run.reads.table("logs").select(["arm", "seq", "timestamp", "text"]).to_pylist()
        lines = [(str(line["timestamp"]), str(line["text"])) for line in logs if line["arm"] == arm.arm]
        block = error_block(lines, ok[-1]["recv_ns"] if ok else None)
        failure.root_cause, failure.cause = shortened(block), cause_line(block)
        failures.append(failure)
    return failures
