"""A sweep whose report cannot be made does not pass silently (Hydra swallows callback exceptions)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from orchestrator.console import Outcome
from orchestrator.sweep.callback import SweepCompare


def test_a_failed_sweep_report_sets_a_failing_status(tmp_path: Path) -> None:
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "run.json").write_text("{not json")  # a job dir the report cannot read
    SweepCompare().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert SweepCompare.outcome.status == 1
    assert "the sweep report failed" in SweepCompare.outcome.notes[0]
    SweepCompare.outcome = Outcome()
