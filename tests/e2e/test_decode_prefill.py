"""Decode against prefill on the reference engine (study decode_prefill, protocol.rescore): every distinct answer is
re-scored as a prompt, one `rescore` row each; without the planted decode-only defect decode and prefill agree at
every position (argmax, and the chosen token's logprob within fp32 rounding), with it they disagree from the second
generated token on (its first is the prefill's own). In Docker as CI runs it, and as processes (runtime=process)."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

ROUNDING = 1e-4  # fp32 reductions of another shape (a prefill's rows against a decode step's one row)
PROCESS = ["runtime=process", "arm@arms.exact=reference_process", "arm@arms.decode_defect=reference_process"]


def _run(tmp_path: Path, *overrides: str) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    result = orchestrator("run", "study=decode_prefill", f"hydra.run.dir={tmp_path}", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(tmp_path / "data" / "responses").to_pylist()
    return json.loads((tmp_path / "report.json").read_text())["decode_prefill"], rows, \
        (tmp_path / "report.md").read_text()


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_in_docker(tmp_path: Path) -> None:
    _check(tmp_path)


def test_as_processes(tmp_path: Path) -> None:
    _check(tmp_path, *PROCESS)


def _check(tmp_path: Path, *runtime: str) -> None:
    found, rows, page = _run(tmp_path, *runtime)
    answers = {(r["arm"], r["prompt_id"], r["sig_token_ids"]) for r in rows if r["role"] == "measured"}
    rescored = collections.Counter((r["arm"], r["prompt_id"], r["request_id"].rsplit("/", 1)[-1])
                                   for r in rows if r["role"] == "rescore")
    assert set(rescored) == answers and set(rescored.values()) == {1}  # one row per distinct answer
    assert all(r["error"] is None and r["phase"] == "rescore" for r in rows if r["role"] == "rescore")
    cells = {(c["arm"], c["prompt_id"], c["phase"]): c for c in found["cells"]}
    assert len(cells) == 8 and not found["unobservable"]
    for (arm, _, _), cell in cells.items():
        assert cell["answers"] > 0 and cell["unscored"] == 0, cell
        assert 0 < cell["positions"] <= 16 * cell["answers"], cell  # 16 tokens each, fewer where one ended early
        if arm == "exact":
            assert cell["argmax_share"] == 1 and cell["disagree_positions"] == [], cell
            assert cell["max_abs_delta"] <= ROUNDING, cell
        else:
            assert cell["max_abs_delta"] > 10 * ROUNDING and cell["max_delta_position"] > 0, cell
    assert "## Decode against prefill (protocol.rescore)" in page
