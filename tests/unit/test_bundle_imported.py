"""A bundle of an imported run (docs/import.md: it names no command to re-run it) offers only what works on it:
`compare`, not `run --from` or `reproduce`, which refuse a run dir that `orchestrator run` did not write."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from tests.conftest import ROOT, orchestrator

SOURCE = ROOT / "tests" / "data" / "import" / "detllm" / "fused_on_tier2"


def test_a_bundled_import_names_compare_and_no_rerun(tmp_path: Path) -> None:
    assert orchestrator("import", str(SOURCE), "--out", str(tmp_path / "imported")).returncode == 0
    bundled = orchestrator("bundle", str(tmp_path / "imported"), "--out", str(tmp_path / "imported.zip"))
    assert bundled.returncode == 0, bundled.stderr[-2000:]
    assert f"compare it anywhere: orchestrator compare {tmp_path / 'imported.zip'}" in bundled.stderr
    assert "run --from" not in bundled.stderr and "reproduce" not in bundled.stderr  # before: both offered
    with zipfile.ZipFile(tmp_path / "imported.zip") as zipped:
        commands = json.loads(zipped.read("imported/bundle/bundle.json"))["commands"]
    assert (commands["rerun"], commands["reproduce"]) == (None, None)
    assert commands["compare"] == "orchestrator compare imported.zip"
