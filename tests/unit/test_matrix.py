"""`orchestrator matrix` (issue 49, the support matrix) over committed run dirs from two hosts (a CPU VM, an
H100): the cell key read from the record, a cell two runs measured shown twice with their agreement, the CSV the
same bytes in any order of its inputs, one line and exit 2 for bad input."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import shutil
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.analysis.matrix import Measurement, agreement
from orchestrator.report.matrix import gather, write
from tests.conftest import ROOT

RESULTS = ROOT / "docs" / "probe-results"
CPU = RESULTS / "cpu-2026-12-06" / "control_precision"
H100_EXTENDED = RESULTS / "h100-load-extended" / "transformers_load_cost"
H100_FIRST = RESULTS / "h100-load-cost" / "transformers_load_cost"  # the same arms, an earlier run
RUNS = [CPU, H100_EXTENDED, H100_FIRST]


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "matrix.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_csv_is_the_same_bytes_whatever_the_order_of_the_run_dirs(tmp_path: Path) -> None:
    made = set()
    for order in itertools.permutations(RUNS):
        write(list(order), tmp_path)
        made.add((tmp_path / "matrix.csv").read_bytes())
    assert len(made) == 1
    rows = _rows(tmp_path)
    keys = [(r["model"], r["engine"], r["hardware"], r["flags"], r["load_point"], r["run_id"], r["arm"]) for r in rows]
    assert len(rows) > 20 and len(set(keys)) == len(keys)


def test_a_cell_is_keyed_by_what_the_record_says_of_its_arm(tmp_path: Path) -> None:
    write([CPU, H100_EXTENDED], tmp_path)
    rows = _rows(tmp_path)
    cpu = next(r for r in rows if r["run_id"].startswith("ctl1") and r["arm"] == "fp32" and r["phase"] == "sequential")
    assert (cpu["engine"], cpu["engine_version"], cpu["runtime"], cpu["topology"]) == \
        ("reference", "0.1.0", "process", "tp=1 pp=1 dp=1")
    assert cpu["hardware"].startswith("Intel") and "dtype=float32" in cpu["flags"]
    assert (cpu["n"], cpu["divergent"], cpu["load_point"]) == ("12", "0", "sequential")
    gpu = next(r for r in rows if r["arm"] == "cb" and r["phase"] == "load_8")
    assert gpu["hardware"] == "NVIDIA H100 80GB HBM3" and gpu["engine"] == "transformers_serve"
    assert gpu["load_point"] == "poisson 8/s, at most 64 at once" and "continuous-batching=true" in gpu["flags"]
    assert float(gpu["output_tokens_per_s_lower_95"]) < float(gpu["output_tokens_per_s"]) < \
        float(gpu["output_tokens_per_s_upper_95"])
    assert not gpu["evidence"].startswith("/")  # relative to OUT, so the folder can move with its runs
    assert gpu["evidence"].endswith("h100-load-extended/transformers_load_cost/report.md")
    assert (tmp_path / gpu["evidence"]).resolve() == H100_EXTENDED.resolve() / "report.md"
    assert gpu["rerun"] == f"orchestrator reproduce {H100_EXTENDED}"


def test_a_cell_two_runs_measured_shows_both_and_whether_they_agree() -> None:
    rows = gather([H100_EXTENDED, H100_FIRST])
    twice = [row for row in rows if len({m.run_id for m in row.measurements}) == 2]
    assert twice, "the two H100 runs share the plain arm's cells"
    plain = next(row for row in twice if row.measurements[0].arm == "plain")
    assert [m.run_id for m in plain.measurements] == sorted(m.run_id for m in plain.measurements)
    assert plain.agreement == "agree"  # 0 divergent in both: their intervals overlap
    apart = dataclasses.replace(plain.measurements[1], divergence_lower_95=0.5, divergence_upper_95=0.9)
    assert agreement([plain.measurements[0], apart]) == "differ"


def test_the_page_filters_each_column_and_needs_no_network(tmp_path: Path) -> None:
    write([CPU], tmp_path)
    page = (tmp_path / "matrix.html").read_text()
    header = _rows(tmp_path)[0].keys()
    assert page.count('<th><input aria-label="filter ') == len(header)
    assert "http://" not in page and "https://" not in page and "<script src" not in page
    assert "| divergent/n [95 %] |" in (tmp_path / "matrix.md").read_text()
    assert '"rows": [' in (tmp_path / "matrix.json").read_text()


@pytest.mark.parametrize(("argv", "said"), [
    ([], "no run dir given: pass one or more folders"),
    (["{tmp}"], "is not a run directory (no run.json)"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], said: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["matrix", *[a.format(tmp=tmp_path) for a in argv], "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and said in err and len(err.splitlines()) == 1


def test_a_run_without_report_json_is_re_made_from_its_record_alike(tmp_path: Path) -> None:
    bare = tmp_path / "control_precision"
    shutil.copytree(CPU, bare, ignore=shutil.ignore_patterns("report.*"))

    def counts(found: list[Measurement]) -> list[tuple[str, str, str, int, int]]:
        return sorted((m.key.load_point, m.arm, m.phase, m.n, m.divergent) for m in found)

    committed, remade = (counts([m for row in gather([d]) for m in row.measurements]) for d in (CPU, bare))
    assert remade == committed and len(remade) == 6
    assert not (bare / "report.json").exists()  # nothing written into the run dir
    write([bare], tmp_path / "out")
    assert {r["evidence"] for r in _rows(tmp_path / "out")} == {"../control_precision"}
