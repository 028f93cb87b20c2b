"""Every committed report.json under docs/probe-results/ re-made by `compare` from its run dir's record, into
another dir: the same verdicts (each cell's counts and bounds, each pair's and schedule's verdict, the headline, the
gate, the guard's checks, what each arm's engine cannot observe, the candidate causes). A committed report whose run
dir kept no record is named here with why, and the test checks it still has none: nothing is skipped unsaid.
Beside these, a re-made report differs from the committed one where the report grew (fields added to cells since,
`front`), in the paths its commands name, in "where inside the model" (the digests tables were not committed) and
in the kernel probes recorded in a run dir after its report (scripts/compare-report-json.py lists every difference)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import cli
from tests.conftest import ROOT

RESULTS = ROOT / "docs" / "probe-results"
# Committed reports whose run dir kept run.json and the reports but not data/ (the record): not re-made.
NOT_RECORDED = {
    "cpu-2026-12-06/load_point": "docs/load.md cites its report and the command's output; the run's Parquet record "
                                 "was not committed with them",
    **{f"cpu-2026-12-06/router_ties_{share}": "docs/mechanisms.md cites its report and the command's output "
       "(router_ties_SHARE.txt); the run's record was not committed with them" for share in ("0.01", "0.05", "0.2")},
}
# Words the report changed after a record's report was committed (0326b40: counts meet their nouns through
# errors.counted), not verdicts: the committed headline is read with them.
WORDS = {"cell(s)": "cells"}


def _reports() -> list[Path]:
    return sorted(path.parent for path in RESULTS.rglob("report.json"))


def _recorded(run_dir: Path) -> bool:
    return any((run_dir / "data" / "responses").glob("*.parquet"))


def _shaped(value: Any, like: Any) -> Any:
    """`value` with only the keys `like` has, all the way down: the guard grew fields (the pairs' `coupled`, the
    known issues) after a committed report was made, and what it decided then is what is compared."""
    if isinstance(value, dict) and isinstance(like, dict):
        return {k: _shaped(value.get(k), v) for k, v in like.items()}
    if isinstance(value, list) and isinstance(like, list) and len(value) == len(like):
        return [_shaped(v, w) for v, w in zip(value, like, strict=True)]
    return value


def _verdicts(report: dict[str, Any], cell_fields: dict[tuple[str, str, str], set[str]],
              guard: dict[str, Any]) -> dict[str, Any]:
    """What a report decided; of each cell and of the guard, the fields the committed report has (a later
    report adds some)."""
    headline = report["headline"]
    for old, new in WORDS.items():
        headline = [sentence.replace(old, new) for sentence in headline]
    return {"cells": {key: {f: c.get(f) for f in sorted(cell_fields[key])} for c in report["cells"]
                      if (key := (c["arm"], c["prompt_id"], c["phase"])) in cell_fields},
            "cell_keys": sorted((c["arm"], c["prompt_id"], c["phase"]) for c in report["cells"]),
            "pairs": [(p["arm_a"], p["arm_b"], p["prompt_id"], p["phase"], p["verdict"]) for p in report["pairs"]],
            "schedules": [(s["arm"], s["prompt_id"], s["phase_a"], s["phase_b"], s["verdict"])
                          for s in report["schedules"]],
            "pooled": report.get("pooled"), "headline": headline, "gate": report["gate"],
            "guard": _shaped(report.get("guard") or {}, guard),
            "unobserved": report.get("unobserved"), "arms": [(a["arm"], a["status"]) for a in report["arms"]],
            "decode_prefill": report.get("decode_prefill")}


def test_every_committed_report_is_either_re_made_or_named_as_without_its_record() -> None:
    found = {str(run_dir.relative_to(RESULTS)): _recorded(run_dir) for run_dir in _reports()}
    assert len(found) >= 4  # the scan sees the committed reports
    assert {name for name, recorded in found.items() if not recorded} == set(NOT_RECORDED)


@pytest.mark.parametrize("name", [str(d.relative_to(RESULTS)) for d in _reports() if _recorded(d)])
def test_a_committed_report_re_made_by_compare_has_the_same_verdicts(name: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = RESULTS / name
    committed = json.loads((run_dir / "report.json").read_text())
    status = cli.main(["compare", str(run_dir), "--out", str(tmp_path)])
    capsys.readouterr()
    remade = json.loads((tmp_path / "report.json").read_text())
    assert status == (3 if committed["gate"]["verdict"] == "fail" else 0)
    fields = {(c["arm"], c["prompt_id"], c["phase"]): set(c) for c in committed["cells"]}
    guard = committed.get("guard") or {}
    assert _verdicts(remade, fields, guard) == _verdicts(committed, fields, guard)
    if committed.get("attribution") is not None:  # the run's kernel probes, read from it though the report goes away
        assert remade["attribution"] == committed["attribution"]
