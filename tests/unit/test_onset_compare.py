"""`orchestrator compare` and `ls` on an onset search's sweep dir: compare re-makes the onset report from
onset.json (never a generic sweep report over its job dirs); ls names a job dir an interrupted round left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.record.paths import RunPaths
from orchestrator.report.listing import show, summary
from orchestrator.report.verdict import recompare
from orchestrator.sweep.onset import search
from orchestrator.sweep.onset_config import grid
from orchestrator.sweep.onset_run import _write
from orchestrator.sweep.onset_state import resumed
from tests.unit.test_onset_sweep import Fake, settings


def interrupted_search(sweep: Path) -> None:
    """As `run` leaves it: multirun.yaml, two jobs in onset.json, the third job's dir cut short by Ctrl-C."""
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    s = settings()
    with pytest.raises(KeyboardInterrupt):
        search(s, resumed(sweep, s, [], grid(s.axis)), sweep, Fake(sweep, lambda v: 5 if v > 300 else 0,
                                                                  interrupt_at=2), lambda st: _write(sweep, st))
    (sweep / "2" / "run.json").write_text(json.dumps({"study": "onset_x", "interrupted": "2026-12-06T07:00"}))


def test_compare_remakes_the_onset_report_and_not_a_sweeps(tmp_path: Path) -> None:
    interrupted_search(tmp_path)
    md, page = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    (tmp_path / "report.md").unlink()
    outcome = recompare([tmp_path], None, None, False, False, None, [], [])
    assert outcome.status == 0
    assert (tmp_path / "report.md").read_text() == md and (tmp_path / "report.html").read_text() == page
    said = "\n".join(outcome.out)
    assert said.startswith("provisional (the search was interrupted): onset in ["), said
    assert f"Onset report: {tmp_path / 'report.md'}" in said and "Sweep report" not in said
    with pytest.raises(ConfigError, match="is an onset search: compare takes no --out"):
        recompare([tmp_path], tmp_path / "out", None, False, False, None, [], [])


def test_ls_says_an_abandoned_job_dir_is_not_to_resume(tmp_path: Path) -> None:
    interrupted_search(tmp_path)
    said = summary(RunPaths(tmp_path / "2")).verdict
    assert said.startswith("abandoned by the onset search's interrupted round: not counted") and "--resume" not in said
    shown = show(tmp_path / "2")
    assert shown.endswith(f"{said}.") and "--resume" not in shown
