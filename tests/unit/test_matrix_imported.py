"""An imported run in the support matrix (docs/import.md, docs/usage.md "The support matrix"): its tool observed no
start and no runtime, and it names no command to re-run it, so its rows say none: not a failed start on Docker
with an `orchestrator reproduce` that refuses it."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.conftest import ROOT, orchestrator

SOURCE = ROOT / "tests" / "data" / "import" / "detllm" / "fused_on_tier2"


def test_an_imported_run_has_no_start_runtime_or_rerun_in_the_matrix(tmp_path: Path) -> None:
    assert orchestrator("import", str(SOURCE), "--out", str(tmp_path / "imported")).returncode == 0
    made = orchestrator("matrix", str(tmp_path / "imported"), "--out", str(tmp_path / "matrix"))
    assert made.returncode == 0, made.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "matrix" / "matrix.csv").open()))
    assert rows and {r["arm"] for r in rows} == {"detllm", "batch_4"}
    for row in rows:  # before: runtime docker, 1 start 1 failed (bound 1), `orchestrator reproduce DIR`
        assert (row["runtime"], row["starts"], row["start_failures"], row["rerun"]) == ("-", "", "", "-")
    assert "| 8/10 [" in (tmp_path / "matrix" / "matrix.md").read_text()  # its divergence is still read
    # detLLM's runs and its batch-4 trace are two cells, told by the tool's own settings (before: one cell, "agree")
    assert {r["arm"]: r["flags"] for r in rows} == {"detllm": "batch_size=1 mode=best-effort",
                                                    "batch_4": "batch_size=4 mode=best-effort"}
    assert made.stdout.startswith("2 cells, 0 measured more than once")
