"""An imported run's arms were never started here (docs/import.md): the report says its starts are not recorded,
not "0 of 1" started, the reading of a start that failed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, orchestrator

SOURCE = ROOT / "tests" / "data" / "import" / "detllm" / "fused_on_tier2"


def test_an_imported_run_reports_no_starts(tmp_path: Path) -> None:
    assert orchestrator("import", str(SOURCE), "--out", str(tmp_path / "imported")).returncode == 0
    report = (tmp_path / "imported" / "report.md").read_text()
    assert "Starts: 0 of 1" not in report and report.count("Starts: not recorded") == 2  # detllm, batch_4
    assert json.loads((tmp_path / "imported" / "report.json").read_text())["cost"]["starts"] == []
