"""Progress: one plain line per arm and phase when not on a terminal (counts, failures), rich bars on one."""

from __future__ import annotations

import io

import pytest

from orchestrator.run.progress import Progress
from orchestrator.run.send.extension import WarmupExtension


def rows(arm: str, phase: str, n: int, failed: int = 0) -> list[dict[str, object]]:
    return [{"arm": arm, "phase": phase, "error": "HTTP 500" if i < failed else None} for i in range(n)]


def test_plain_lines_say_each_phase_once_with_its_failures() -> None:
    lines: list[str] = []
    with Progress(lines.append, live=False) as progress:
        progress.arm("a", {"sequential": 3, "concurrent": 4})
        for row in rows("a", "sequential", 3) + rows("a", "concurrent", 4, failed=2):
            progress.row(row)
    assert [line.split(", ")[:2] for line in lines] == [["[a] sequential: 3/3 requests", "0 failed"],
                                                        ["[a] concurrent: 4/4 requests", "2 failed"]]


def test_bars_count_done_and_failed_per_arm_and_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    lines: list[str] = []
    with Progress(lines.append, live=True) as progress:
        progress.arm("a", {"sequential": 2})
        for row in rows("a", "sequential", 2, failed=1):
            progress.row(row)
        [task] = progress._bars.tasks
        assert (task.description, task.completed, task.total, task.fields["failed"]) == ("a sequential", 2, 2, 1)
    assert lines == [] and "a sequential" in stream.getvalue()


def test_a_phase_the_stop_rule_ends_early_still_gets_its_line() -> None:
    """stop_after_divergences leaves a cell's later batches unsent: they leave the phase's total."""
    lines: list[str] = []
    with Progress(lines.append, live=False) as progress:
        progress.arm("a", {"batched": 80})  # 2 prompts x 2 batches of 20
        for row in rows("a", "batched", 20):
            progress.row(row)
        progress.ended("a", "batched", 20)  # prompt 1 stopped after its first batch
        assert lines == []
        for row in rows("a", "batched", 20):
            progress.row(row)
        progress.ended("a", "batched", 20)  # so did prompt 2
    assert [line.split(", ")[:3] for line in lines] == [
        ["[a] batched: 40/40 requests", "0 failed", "40 not sent (stop_after_divergences)"]]


def test_each_rule_says_why_its_requests_were_not_sent() -> None:
    """A warm-up extended until steady leaves its unneeded windows unsent, and says so, not the stop rule."""
    lines: list[str] = []
    with Progress(lines.append, live=False) as progress:
        progress.arm("a", {"load": 36})
        for row in rows("a", "load", 24):
            progress.row(row)
        progress.ended("a", "load", 12, WarmupExtension.skipped_because)
    assert lines[0].split(", ")[2] == "12 not sent (steady without them: load.warmup.extend_windows)"
