"""console.py is the one place a verb's outcome is printed and its exit status picked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator.console import Outcome, answer, failed, finish, note
from orchestrator.errors import ConfigError, ExitStatus, RuntimeFailure

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"
# Who else may print, and why: what is said while a run goes (before the arms start, progress), and programs
# of their own (the reaper sidecar, the probe files shipped into images).
PRINTS_OF_THEIR_OWN = {"console.py", "run/study.py", "run/execute.py", "reproduce/rerun.py", "reproduce/resume.py",
                       "runtime/reaper.py",
                       "triage/procedure.py", "triage/runner.py"}  # a triage's steps as they end, on stderr


def test_lines_come_out_in_the_order_said_on_their_stream(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = note("warning: w") + answer("table", "Report: r") + note("done")
    assert finish(outcome) == 0
    said = capsys.readouterr()
    assert said.out == "table\nReport: r\n" and said.err == "warning: w\ndone\n"
    assert outcome.out == ["table", "Report: r"] and outcome.notes == ["warning: w", "done"]


@pytest.mark.parametrize(("statuses", "worst"), [
    ((), ExitStatus.OK), ((ExitStatus.GATE_FAILED, ExitStatus.MEASUREMENT_FAILED), ExitStatus.MEASUREMENT_FAILED),
    ((ExitStatus.MEASUREMENT_FAILED, ExitStatus.INTERRUPTED), ExitStatus.INTERRUPTED),
    ((ExitStatus.GATE_FAILED, ExitStatus.BAD_INPUT), ExitStatus.BAD_INPUT), ((ExitStatus.OK, 99), ExitStatus.INTERNAL)])
def test_the_status_is_the_worst_by_precedence(statuses: tuple[int, ...], worst: int) -> None:
    assert Outcome(statuses=statuses).status == worst
    assert sum((note(status=s) for s in statuses), Outcome()).status == worst


def test_an_exception_ends_a_verb_with_its_lines_and_status() -> None:
    assert failed(ConfigError(["a: bad", "b: bad"])) == note("error: a: bad", "error: b: bad", status=2)
    assert failed(RuntimeFailure("no host")).status == ExitStatus.MEASUREMENT_FAILED
    interrupt = KeyboardInterrupt()
    interrupt.add_note("`orchestrator run --resume RUN` sends the rest")
    assert failed(interrupt).notes[-1] == "interrupted: `orchestrator run --resume RUN` sends the rest"
    assert failed(interrupt).status == ExitStatus.INTERRUPTED
    bug = failed(KeyError("x"))
    assert bug.status == ExitStatus.INTERNAL and bug.notes[0].startswith("internal error (a bug in the orchestrator)")


def test_no_other_module_prints() -> None:
    """A verb's output goes through an Outcome; a module that starts to print is caught here."""
    printing = set()
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "probes":  # shipped into images, run there as programs
            continue
        calls = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]
        if any(isinstance(call.func, ast.Name) and call.func.id == "print" for call in calls):
            printing.add(str(path.relative_to(PACKAGE)))
    assert printing == PRINTS_OF_THEIR_OWN
