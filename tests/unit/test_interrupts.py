"""Ctrl-C inside the event loop: the main task is cancelled (its clean-up runs) and the verb sees a
KeyboardInterrupt, never a library's RuntimeError from a cancel scope the interrupt landed in."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal

import pytest

from orchestrator.interrupts import interruptible, run_async


def test_an_interrupt_in_the_loop_cancels_the_task_and_is_raised_as_keyboard_interrupt() -> None:
    cleaned: list[str] = []

    async def send() -> None:
        try:
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cleaned.append("rows for what was in flight")
            raise

    with interruptible(), pytest.raises(KeyboardInterrupt):
        run_async(send())
    assert cleaned == ["rows for what was in flight"]


def test_without_an_interrupt_it_is_asyncio_run_and_the_handlers_stay() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    with interruptible():
        before = signal.getsignal(signal.SIGINT)
        assert run_async(answer()) == 42
        assert signal.getsignal(signal.SIGINT) is before


def test_the_interrupt_line_carries_how_to_finish_the_run(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A run that recorded something notes `run --resume RUN` on its KeyboardInterrupt; the verb's line says it."""
    from orchestrator import cli

    def stopped(argv: list[str]) -> int:
        exc = KeyboardInterrupt()
        exc.add_note("what it received is kept; `orchestrator run --resume /tmp/r` sends the rest")
        raise exc

    monkeypatch.setattr(importlib.import_module("orchestrator.verbs.run"), "main", stopped)
    assert cli.main(["run"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "interrupted: this run's containers and processes were stopped and removed",
        "interrupted: what it received is kept; `orchestrator run --resume /tmp/r` sends the rest"]
