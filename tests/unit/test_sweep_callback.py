"""A sweep whose report cannot be made does not pass silently (Hydra swallows callback exceptions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator.console import Outcome
from orchestrator.sweep import callback
from orchestrator.sweep.callback import SweepCompare


def _end(sweep_dir: Path) -> Outcome:
    SweepCompare().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}}))
    outcome, SweepCompare.outcome = SweepCompare.outcome, Outcome()
    return outcome


def test_a_damaged_job_record_fails_the_sweep_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "run.json").write_text("{not json")  # a job dir the report cannot read: bad input, exit 2
    outcome = _end(tmp_path)
    assert outcome.status == 2
    assert f"{tmp_path / '0' / 'run.json'} cannot be read" in outcome.notes[0] and "damaged" in outcome.notes[0]


def test_a_failed_sweep_report_sets_a_failing_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(callback, "summarize", broken)
    outcome = _end(tmp_path)
    assert outcome.status == 1
    assert "the sweep report failed" in outcome.notes[0]
