"""Cells whose rows the record holds apart (issue 45 item 1): a load phase's windows, each written whole as it ends
with every cell's probes in it, and the rows `run --resume` sent again after the rest. Each cell is read whole, in
the order its requests were planned; a folder merged by hand is still refused (test_compare.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from orchestrator.analysis.cells import iter_cells
from orchestrator.analysis.compare import compare
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter
from tests.unit.test_compare import row


def probe(prompt: str, window: int, seq: int, ids: list[int], attempt: int = 0) -> dict[str, Any]:
    return row("a", prompt, "load", ids, kind="load", batch_id=window, repeat=seq, role="measured", attempt=attempt,
               request_id=f"a/{prompt}/load/{window}/{seq}", load_point="poisson 8/s")


def background(window: int, seq: int, attempt: int = 0) -> dict[str, Any]:
    return row("a", "bg0", "load", [9], kind="load", batch_id=window, repeat=seq, role="background",
               attempt=attempt, request_id=f"a/background/load/{window}/{seq}", load_point="poisson 8/s")


def written(tmp_path: Path, units: list[list[dict[str, Any]]]) -> RunPaths:
    """Each unit as the protocol writes a load window: whole, in a part of its own."""
    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "responses", "a") as writer:
        for unit in units:
            writer.append_whole(unit)
    return paths


def test_a_load_phases_cells_are_read_whole_across_its_windows(tmp_path: Path) -> None:
    windows = [[probe("p", w, 0, [1]), background(w, 1), probe("q", w, 2, [1]), background(w, 3),
                probe("p", w, 4, [2] if w == 1 else [1]), probe("q", w, 5, [1])] for w in range(3)]
    result = compare(written(tmp_path, windows)).to_json()
    cells = {c["prompt_id"]: (c["n"], c["divergent"]) for c in result["cells"]}
    assert cells == {"p": (6, 1), "q": (6, 0)}  # every window's probes, each once; the background in none
    assert [c["prompt_id"] for c in result["cells"]] == ["p", "q"]  # in the order they first appear


def test_a_window_sent_again_by_resume_counts_its_latest_attempt_in_plan_order(tmp_path: Path) -> None:
    first = [[probe("p", 0, 0, [1]), probe("q", 0, 1, [1])],  # window 0 whole; window 1 was cut by Ctrl-C:
             [{**probe(p, 1, s, [7]), "role": "interrupted", "error": "interrupted"} for s, p in enumerate("pq")]]
    again = [[{**probe("p", w, 0, [1], 1), "cold": False}, probe("q", w, 1, [2] if w == 2 else [1], 1)]
             for w in (1, 2)]
    paths = written(tmp_path, [*first, *again])
    cuts = {cut.key[1]: cut.rows.select(["batch_id", "repeat", "token_ids"]).to_pylist() for cut in iter_cells(paths)}
    assert cuts["p"] == [{"batch_id": w, "repeat": 0, "token_ids": [1]} for w in range(3)]  # not the cut one's [7]
    assert [r["batch_id"] for r in cuts["q"]] == [0, 1, 2]
    q = next(c for c in compare(paths).to_json()["cells"] if c["prompt_id"] == "q")
    assert (q["n"], q["divergent"], q["errors"]) == (3, 1, 0)  # the interrupted rows are in no cell


def test_a_request_sent_again_after_the_rest_takes_its_planned_place(tmp_path: Path) -> None:
    """An arm that failed mid-run: its error row is sent again at the end, after other cells' rows."""
    seq = [row("a", "p", "seq", [1], repeat=r, request_id=f"a/p/seq/0/{r}", role="measured", attempt=0)
           for r in range(3)]
    seq[1] = {**seq[1], "error": "HTTP 500", "token_ids": [5]}
    other = [row("a", "q", "seq", [1], repeat=r, request_id=f"a/q/seq/0/{r}", role="measured", attempt=0)
             for r in range(2)]
    resent = {**seq[1], "error": None, "token_ids": [3], "attempt": 1}
    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "responses", "a") as writer:
        for r in [*seq, *other, resent]:
            writer.append(r)
    [p] = [cut for cut in iter_cells(paths) if cut.key[1] == "p"]
    assert p.rows.column("repeat").to_pylist() == [0, 1, 2]
    assert p.rows.column("token_ids").to_pylist() == [[1], [3], [1]] and p.rows.column("error").null_count == 3


def test_a_unit_lands_in_a_part_of_its_own(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "responses", "a", flush_rows=100) as writer:
        writer.append(background(-1, 0))
        writer.append_whole([probe("p", 0, 0, [1]), background(0, 1)])
        writer.append(background(1, 0))
    parts = sorted(paths.table("responses").glob("*.parquet"))
    assert [pq.read_metadata(p).num_rows for p in parts] == [1, 2, 1]  # what was pending first, then the unit


def test_a_window_cut_by_ctrl_c_is_in_no_cost_and_the_record_still_reads(tmp_path: Path) -> None:
    """The interrupted record itself (before `run --resume`): its cut window's rows have a send time and no
    answer; the cost is of the whole windows only, and nulls beside times in ns do not stop it."""
    from orchestrator.analysis.cost import load_groups, phase_cost

    now = 1_796_538_994_727_484_906  # ns since 1970: beyond float64's exact integers

    def timed(r: dict[str, Any], at: int, answered: bool = True) -> dict[str, Any]:
        return {**r, "send_ns": now + at, "scheduled_ns": now + at if answered else None,
                "recv_ns": now + at + 20_000_000 if answered else None, "completion_tokens": 1 if answered else None}

    whole = [timed(probe("p", 0, 0, [1]), 0), timed(background(0, 1), 1_000_000)]
    cut = [timed({**probe("p", 1, s, [1]), "role": "interrupted", "error": "interrupted"}, 50_000_000 + s, False)
           for s in range(2)]
    [(key, rows)] = load_groups(written(tmp_path, [whole, cut])).items()
    cost = phase_cost(*key, rows)
    assert (cost.windows, cost.requests, cost.errors) == (1, 2, 0)
