"""The support matrix's cells (issue 49, item 3): an arm's flags shown against its engine's defaults, an onset
search's jobs as cells with the search's answer in the target arm's "onset" column, and what else an A/B changed
(the side-effect audit) beside the arm it changed; the CSV stays the same bytes in any order of its inputs."""

from __future__ import annotations

import csv
import itertools
import json
import shutil
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.engines.reference import PROFILE as REFERENCE
from orchestrator.engines.vllm import PROFILE as VLLM
from orchestrator.report.matrix import write
from tests.unit.test_matrix import CPU, H100_FIRST, RESULTS

AXIS = "prompts.prompts.p.length_tokens"
ANSWER = "onset in [2028, 2052] at 95 % (after 2028, by 2052)"


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "matrix.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_flag_at_its_engines_default_is_left_out_and_one_that_differs_says_the_default() -> None:
    assert REFERENCE.non_default({"max-num-seqs": 16, "seed": 0, "no-batch-invariant": True, "dtype": "float32",
                                  "planted": 3}) == {"no-batch-invariant": (True, False), "dtype": ("float32", "auto"),
                                                     "planted": (3, None)}
    assert REFERENCE.non_default({"max-num-seqs": "8", "batch-invariant": True, "max-logprobs": 20.0}) == \
        {"max-num-seqs": ("8", 16)}
    assert VLLM.non_default({"enforce-eager": True, "max-logprobs": 20}) == {"enforce-eager": (True, False)}


def test_the_cells_flags_are_shown_against_the_defaults(tmp_path: Path) -> None:
    write([CPU], tmp_path)
    flags = {r["arm"]: r["flags"] for r in _rows(tmp_path)}
    assert flags["fp32"] == "dtype=float32 (default auto)"  # seed 0, max-num-seqs 16, max-model-len 8192 left out


def _search(tmp_path: Path, jobs: dict[str, float]) -> Path:
    sweep = tmp_path / "onset"
    sweep.mkdir()
    for name in jobs:
        if name != "gone":
            shutil.copytree(CPU, sweep / name)
    state = {"settings": {"axis": {"key": AXIS}, "target": {"arm": "fp32"}}, "interrupted": False,
             "configurations": [{"per": [], "result": {"line": ANSWER},
                                 "jobs": [{"dir": name, "value": value} for name, value in jobs.items()]}]}
    (sweep / "onset.json").write_text(json.dumps(state))
    return sweep


def test_an_onset_search_gives_its_jobs_cells_and_its_answer_to_the_target_arm(tmp_path: Path) -> None:
    write([_search(tmp_path, {"0": 1026, "1": 2052, "gone": 3000})], tmp_path / "out")
    rows = [r for r in _rows(tmp_path / "out") if r["phase"] == "sequential"]
    at = {(r["arm"], r["load_point"]): r["onset"] for r in rows}
    assert at == {("fp32", f"sequential at {AXIS}=1026"): f"along {AXIS}: {ANSWER}",
                  ("fp32", f"sequential at {AXIS}=2052"): f"along {AXIS}: {ANSWER}",
                  ("bf16", f"sequential at {AXIS}=1026"): "-", ("bf16", f"sequential at {AXIS}=2052"): "-",
                  ("bf16_aa", f"sequential at {AXIS}=1026"): "-", ("bf16_aa", f"sequential at {AXIS}=2052"): "-"}
    # two points of the axis are two cells, not one measured twice
    assert {r["agreement"] for r in rows if r["arm"] == "fp32"} == {"one run"}


def test_an_onset_search_without_its_jobs_is_one_line_and_exit_2(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    committed = RESULTS / "cpu-2026-12-06" / "onset_indexer_budget"  # onset.json and its report, no job dirs
    assert cli.main(["matrix", str(committed), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is an onset search whose jobs' run dirs are not there (8 listed in onset.json)" in err
    assert len(err.splitlines()) == 1


def test_what_else_an_ab_changed_is_beside_the_arm_it_changed(tmp_path: Path) -> None:
    write([H100_FIRST, CPU], tmp_path)
    said = {r["arm"]: r["side_effects"] for r in _rows(tmp_path)}
    assert said["plain"].startswith("peak_memory_bytes (3373 MiB -> 1705 MiB); peak_gpu_memory_bytes")
    assert (said["cb"], said["bf16"]) == ("-", "-")  # the baselines
    assert (said["cb_aa"], said["fp32"]) == ("nothing", "nothing")


def test_the_csv_with_an_onset_search_is_the_same_bytes_in_any_order(tmp_path: Path) -> None:
    made = set()
    for order in itertools.permutations([_search(tmp_path, {"0": 1026, "1": 2052}), H100_FIRST, CPU]):
        write(list(order), tmp_path / "out")
        made.add((tmp_path / "out" / "matrix.csv").read_bytes())
    assert len(made) == 1
