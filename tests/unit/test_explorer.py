"""The divergence explorer on hand-made rows with known answers: the branches, where each splits, the top-k of
both there, who took each branch and in which batches; then the same in report.md, report.html and `show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.compare import compare
from orchestrator.analysis.results import Comparison
from orchestrator.errors import ConfigError
from orchestrator.report import explorer_html, explorer_md
from orchestrator.report.listing import show, show_cell
from tests.unit.test_compare import record, row

NEAR = -0.1001  # top-2 logprob 1e-4 below top-1: a near-tie


def measured(arm: str, phase: str, ids: list[int], batch: int, repeat: int, steps: tuple[int, int] | None = None,
             **extra: Any) -> dict[str, Any]:
    kind = "concurrent" if phase == "conc" else "sequential"
    first, last = steps or (None, None)
    return row(arm, "p", phase, ids, kind=kind, batch_id=batch, repeat=repeat, role="measured",
               request_id=f"{arm}/p/{phase}/{batch}/{repeat}", server_first_step=first, server_last_step=last,
               tokens=[f"t{t}" for t in ids], **extra)


def study_rows() -> list[dict[str, Any]]:
    """Arm a: four sequential requests, then two batches of four released together; three requests of batch 1
    took token 9 at position 2, where the modal completion's top two were 1e-4 apart. Arm b: another token
    there, sequentially."""
    rows = [measured("a", "seq", [1, 2, 3, 4], 0, r, top2_lp=NEAR) for r in range(4)]
    rows += [measured("a", "conc", [1, 2, 3, 4], 0, r, (0, 5), top2_lp=NEAR) for r in range(4)]
    rows += [measured("a", "conc", [1, 2, 9, 4], 1, r, (10, 15)) for r in range(3)]
    rows += [measured("a", "conc", [1, 2, 3, 4], 1, 3, (20, 25), top2_lp=NEAR)]
    rows += [measured("b", "seq", [1, 2, 5, 6], 0, r, top2_lp=NEAR) for r in range(4)]
    return rows


@pytest.fixture
def result(tmp_path: Path) -> Comparison:
    return compare(record(tmp_path, study_rows()), baseline="a")


def test_a_divergent_cell_shows_its_branches_where_they_split_and_the_top_k_there(result: Comparison) -> None:
    [cell] = result.explorer
    assert (cell.label, cell.n, cell.window_start) == ("a/p/conc", 8, 0)
    modal, branch = cell.completions
    assert (modal.name, modal.requests, modal.split, modal.tokens) == ("modal", 5, None, ["t1", "t2", "t3", "t4"])
    assert (branch.name, branch.requests, branch.split, branch.split_kind) == ("branch 1", 3, 2, "token")
    assert branch.tokens == ["t1", "t2", "t9", "t4"] and branch.request_ids == ["a/p/conc/1/0", "a/p/conc/1/1",
                                                                                  "a/p/conc/1/2"]
    assert [(e.token, e.logprob) for e in branch.first_top_at_split] == [("t3", -0.1), ("other", NEAR)]
    assert [(e.token, e.logprob) for e in branch.top_at_split] == [("t9", -0.1), ("other", -2.0)]
    assert branch.gap_at_split == pytest.approx(1e-4) and branch.near_tie is True


def test_each_branch_says_which_batches_sizes_and_co_residents_it_came_from(result: Comparison) -> None:
    [cell] = result.explorer
    modal, branch = cell.completions
    assert modal.batches == [(0, 4), (1, 4)] and branch.batches == [(1, 4)]
    assert modal.batch_sizes == [1, 4] and branch.batch_sizes == [4]  # the modal one was also seen alone
    assert modal.seen_in == {"seq": 4, "conc": 5} and branch.seen_in == {"conc": 3}
    assert modal.co_residents == [0, 3] and branch.co_residents == [2]  # from the server's engine steps
    assert cell.notes == [
        "branch 1 appears only in batches of 4 (conc); the modal completion in batches of 1, 4",
        "branch 1 appears only in batch 1 of 2",
        "branch 1's requests ran alongside 2 other requests, the modal completion's alongside 0, 3"]


def test_a_pair_that_differs_shows_both_modal_completions(result: Comparison) -> None:
    [pair] = result.pair_explorer
    a, b = pair.completions
    assert pair.label == "b vs a/p/seq" and (a.name, b.name) == ("a", "b")
    assert (b.split, b.tokens[2], a.tokens[2]) == (2, "t5", "t3")
    assert [e.token for e in b.top_at_split] == ["t5", "other"] and b.near_tie is True


def test_branches_past_the_limit_are_counted(tmp_path: Path) -> None:
    rows = study_rows()
    rows[12:12] = [measured("a", "conc", [1, 7, 3, 4], 2, r, (30, 35)) for r in range(2)]  # before arm b's
    [cell] = compare(record(tmp_path, rows), baseline="a", branches=1).explorer
    assert [c.name for c in cell.completions] == ["modal", "branch 1"]
    assert (cell.more_branches, cell.more_branch_requests) == (1, 2)


def test_markdown_and_html_mark_the_split_and_list_the_top_k(result: Comparison) -> None:
    markdown = "\n".join(explorer_md.section(result))
    assert "### a/p/conc: 2 signatures in 8 (5 took the modal completion); first split at token 2" in markdown
    assert "| 2 | `t3` -0.1 | **`t9` -0.1 ◀ split** |" in markdown
    assert "| 2 | **`other`** | **-0.1001** | **`other`** | **-2** |" in markdown and "near-tie" in markdown
    assert "batches 1 (of 4)" in markdown and "a/p/conc/1/2" in markdown
    page = explorer_html.section(result)
    assert page.count('<details class="explore"') == 2 and '<td class="split"' in page
    assert "<svg class=\"spark\"" in page and "<polyline" in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")


def test_show_lists_the_divergent_cells_and_prints_one_in_plain_text(result: Comparison, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"study": "s", "run_id": "r", **result.to_json()}))
    assert "a/p/conc: 2 signatures in 8, first split at token 2 (near-tie)" in show(run)
    show_cell(run, "a/p/conc")
    printed = capsys.readouterr().out
    assert "\x1b[" not in printed  # not a terminal: no escapes
    assert "t9  -0.1  <- split" in printed and "batches 1 (of 4)" in printed and "| t9 " in printed
    with pytest.raises(ConfigError, match="--cell"):
        show_cell(run, "a/p/nope")


def test_past_the_limit_a_quarter_is_kept_for_the_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrator.analysis.explorer.MAX_EXPLORED", 4)
    rows = []
    for phase in ("s0", "s1", "s2", "s3"):  # arm a splits in each phase; arm b differs from it in each
        rows += [measured("a", phase, [1, 2, 3] if r else [1, 2, 8], 0, r) for r in range(3)]
        rows += [measured("b", phase, [1, 5, 6], 0, r) for r in range(3)]
    result = compare(record(tmp_path, rows), baseline="a")
    assert [c.label for c in result.explorer] == ["a/p/s0", "a/p/s1", "a/p/s2"]
    assert [p.label for p in result.pair_explorer] == ["b vs a/p/s0"] and result.explorer_left_out == 4
