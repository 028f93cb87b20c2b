"""The divergence explorer on hand-made rows with known answers: the branches, where each splits, the top-k of
both there, who took each branch and in which batches; then the same in report.md, report.html and `show`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.compare import compare
from orchestrator.analysis.gaps import top_gaps
from orchestrator.analysis.results import Comparison
from orchestrator.analysis.signatures import top_logprobs_signature
from orchestrator.errors import ConfigError
from orchestrator.report import explorer_html, explorer_md
from orchestrator.report.listing import show, show_cell
from orchestrator.verbs import show as show_verb
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
    rows += [measured("a", "conc", [1, 2, 9, 4], 1, r, (10, 15), top2_lp=NEAR) for r in range(3)]
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
    assert [(e.token, e.logprob) for e in branch.top_at_split] == [("t9", -0.1), ("other", NEAR)]
    assert branch.gap_at_split == pytest.approx(1e-4) and branch.near_tie is True and branch.flip is None


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
    assert "### a/p/conc: 2 signatures in 8 (5 took the modal one); first split at token 2" in markdown
    assert "| 2 | `t3` -0.1 | **`t9` -0.1 ◀ split** |" in markdown
    assert "| 1 | **`t3`** | **-0.1** | **`t9`** | **-0.1** |" in markdown and "near-tie" in markdown
    assert "| 2 | `other` | -0.1001 | `other` | -0.1001 |" in markdown  # the same on both sides: not bold
    assert "batches #1 (size 4)" in markdown and "a/p/conc/1/2" in markdown
    page = explorer_html.section(result)
    assert page.count('<details class="explore"') == 2 and '<td class="split"' in page
    assert "<svg class=\"spark\"" in page and "<polyline" in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")


def test_show_lists_the_divergent_cells_and_prints_one_in_plain_text(result: Comparison, tmp_path: Path) -> None:
    run = _run_dir(tmp_path, result)
    assert "a/p/conc: 2 signatures in 8, first split at token 2 (near-tie)" in show(run)
    printed = show_cell(run, "a/p/conc")
    assert "\x1b[" not in printed  # not a terminal: no escapes
    assert "t9  -0.1  <- split" in printed and "batches #1 (size 4)" in printed
    # plain text: `*` marks what differs (the colours' stand-in), once explained
    assert "| *t3 " in printed and "*-0.1|" in printed and "| other " in printed and "| *t4 " not in printed
    assert "* differs from the other side at that rank" in printed and "* another token" not in printed
    with pytest.raises(ConfigError, match="--cell"):
        show_cell(run, "a/p/nope")
    with pytest.raises(ConfigError, match="--cell='' names nothing"):  # not the run's summary, exit 0
        show_verb.main([str(run), "--cell", ""])


LONG = list(range(1, 49))  # 48 tokens: t1 .. t48
LONG_TOKENS = [f"t{t}" for t in LONG]


def lp_row(repeat: int, ids: list[int], top2: dict[int, float]) -> dict[str, Any]:
    """A concurrent measured row of arm a (batch 0, place `repeat`): top-1 logprob -0.1 everywhere, top-2 -2 but
    where `top2` says otherwise."""
    top: list[list[dict[str, Any]] | None] = [
        [{"token": f"t{t}", "logprob": -0.1}, {"token": "other", "logprob": top2.get(i, -2.0)}]
        for i, t in enumerate(ids)]
    return {**measured("a", "conc", ids, 0, repeat), "top_logprobs": top, "top_gaps": top_gaps(top),
            "sig_top_logprobs": top_logprobs_signature(top)}


def flipped(at: int) -> list[int]:
    return [99 if i == at else t for i, t in enumerate(LONG)]


# The modal completion's top two are 1e-4 apart at 35 in both: the flip there is a near-tie.
MODAL = [lp_row(r, LONG, {35: NEAR}) for r in range(5)]
ORDERS = {
    # the case: other logprobs from token 0 (-2.5 against -2), the same tokens up to 35, another one there
    "logprob first": ([lp_row(r, flipped(35), {0: -2.5, 35: NEAR}) for r in range(5, 8)],
                      (0, "logprob", 35), [*range(0, 9), *range(31, 44)]),
    # another token at 30 first; logprobs that differ later (at 40) are no second fact: the tokens parted already
    "token first": ([lp_row(r, flipped(30), {35: NEAR, 40: -2.5}) for r in range(5, 8)],
                    (30, "token", None), list(range(26, 39))),
}


@pytest.mark.parametrize("order", ORDERS)
def test_the_split_is_the_first_difference_of_any_kind_and_a_later_flip_is_shown_too(
        tmp_path: Path, order: str) -> None:
    branch_rows, (split, kind, flip), window = ORDERS[order]
    result = compare(record(tmp_path, [*MODAL, *branch_rows]))
    [cell] = result.explorer
    modal, branch = cell.completions
    assert (branch.split, branch.split_kind, branch.flip and branch.flip.position) == (split, kind, flip)
    assert cell.window_positions == window and cell.window_start == window[0]  # around the split and the flip
    assert modal.tokens == [f"t{p + 1}" for p in window] and len(branch.tokens) == len(window)
    markdown = "\n".join(explorer_md.section(result))
    assert f"| {split} | `t{split + 1}` -0.1 | **`t{99 if kind == 'token' else split + 1}` -0.1 ◀ split** |" \
        in markdown
    run = _run_dir(tmp_path, result)
    listed = "first split at token 0 (same token, other logprobs), first other token at 35 (near-tie)" if flip \
        else "first split at token 30"
    assert f"a/p/conc: 2 signatures in 8, {listed}\n" in show(run)  # `show RUN` says the same as the explorer
    printed = show_cell(run, "a/p/conc")
    assert "<- split" in printed
    if flip is None:
        assert branch.near_tie is False and "| … |" not in markdown
        assert "◀ other token" not in markdown and "<- other token" not in printed and "takes another" not in markdown
        assert f"first split at token {split} (another token, gap 1.9)" in markdown
        return
    assert branch.flip is not None and (branch.near_tie, branch.flip.near_tie) == (False, True)
    assert branch.flip.gap == pytest.approx(1e-4) and branch.gap_at_split == pytest.approx(1.9)
    assert [e.token for e in branch.flip.first_top] == ["t36", "other"]
    assert [e.token for e in branch.flip.top] == ["t99", "other"]
    assert ("first split at token 0 (same token, other logprobs, gap 1.9); first other token at 35 (gap 0.0001, "
            "near-tie)") in markdown
    assert "| 35 | `t36` -0.1 | **`t99` -0.1 ◀ other token** |" in markdown and "| … | | |" in markdown
    assert "At token 0, branch 1 parts from modal (the same token, other logprobs); modal's top1-top2 gap 1.9." \
        in markdown  # not a near-tie: no argmax flipped there
    assert "At token 35, branch 1 takes another token than modal (it parted on logprobs at token 0); modal's " \
           "top1-top2 gap 0.0001 (**near-tie**" in markdown
    assert "t99  -0.1  <- other token" in printed and "|  … |" in printed
    page = explorer_html.section(result)
    assert '<td class="split" title="split / -0.1">t1</td>' in page and '<td class="flip"' in page
    assert page.count("<th>…</th>") == 1 and "positions 0-8, 31-43" in page
    assert '<line class="flip"' in page and page.count('<line class="key') == 2 and ">branch 1</text>" in page


def test_a_report_json_written_before_flips_still_shows(result: Comparison, tmp_path: Path) -> None:
    data = result.to_json()["explorer"][0]
    del data["window_positions"]
    for c in data["completions"]:
        del c["flip"]
    explored = explorer_md.from_json(data)
    assert explored.window_positions == [0, 1, 2, 3] and explored.completions[1].flip is None


def test_past_the_limit_a_quarter_is_kept_for_the_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrator.analysis.explorer.MAX_EXPLORED", 4)
    rows = []
    for phase in ("s0", "s1", "s2", "s3"):  # arm a splits in each phase; arm b differs from it in each
        rows += [measured("a", phase, [1, 2, 3] if r else [1, 2, 8], 0, r) for r in range(8)]
        rows += [measured("b", phase, [1, 5, 6], 0, r) for r in range(8)]  # enough to tell the arms apart
    result = compare(record(tmp_path, rows), baseline="a")
    assert [c.label for c in result.explorer] == ["a/p/s0", "a/p/s1", "a/p/s2"]
    assert [p.label for p in result.pair_explorer] == ["b vs a/p/s0"] and result.explorer_left_out == 4


A = "Paris is the capital of France."  # the modal completion
B = "Paris is the capital. <b>big</b>"  # parts from it at character 20
C = A + "\nYes"  # parts from it at character 31, after its end


def text_row(batch: int, slot: int, text: str) -> dict[str, Any]:
    """A concurrent response of a server that returned only its text (transformers serve): no tokens, ids or
    logprobs, so the cell is signed on its text."""
    none = dict.fromkeys(["tokens", "token_ids", "token_logprobs", "top_logprobs", "top_gaps", "sig_token_ids",
                          "sig_top_logprobs"])
    return {**row("t", "p", "conc", [], text=text, kind="concurrent", batch_id=batch, repeat=slot, role="measured",
                  request_id=f"t/p/conc/{batch}/{slot}"), **none}


def slotted(batches: int, place: dict[int, str]) -> list[dict[str, Any]]:
    return [text_row(b, slot, place.get(slot, A)) for b in range(batches) for slot in range(4)]


def test_a_cell_signed_on_text_splits_at_a_character_with_the_shared_prefix_once(tmp_path: Path) -> None:
    [cell] = compare(record(tmp_path, slotted(3, {2: C, 3: B}))).explorer
    assert (cell.basis, cell.window_start, cell.prefix) == ("text", 20, "Paris is the capital")
    modal, first, second = cell.completions
    assert (modal.requests, modal.split, modal.text, modal.length) == (6, None, A[20:], len(A))
    assert (first.requests, first.split, first.split_kind, first.text) == (3, 31, "character", C[20:])
    assert (second.split, second.text, second.text_start) == (20, B[20:], 20)
    assert all(c.tokens == [] and c.top_at_split == [] for c in cell.completions)


def test_a_branch_that_took_the_same_slots_in_every_batch_is_named(tmp_path: Path) -> None:
    [cell] = compare(record(tmp_path, slotted(3, {2: C, 3: B}))).explorer
    assert cell.notes == ["branch 1 took the same slots in every batch (slot 2); so did branch 2 (slot 3) and the "
                          "modal completion (slots 0, 1): the output follows the request's position in the batch, "
                          "repeatably - batch-shape dependence, not run-to-run noise"]


@pytest.mark.parametrize("rows", [
    slotted(1, {2: C, 3: B}),  # one batch: nothing to repeat
    [*slotted(1, {3: B}), *slotted(1, {1: B})],  # batch 0 puts B in slot 3, batch 1 in slot 1 (ids repeat: fine)
], ids=["one batch", "other slots"])
def test_no_slot_note_without_the_same_slots_in_two_batches_or_more(tmp_path: Path, rows: list[dict[str, Any]]
                                                                     ) -> None:
    for i, r in enumerate(rows[4:]):  # the second half is batch 1
        r.update(batch_id=1, request_id=f"t/p/conc/1/{i}")
    [cell] = compare(record(tmp_path, rows)).explorer
    assert not any("same slots" in note for note in cell.notes)


def test_a_branch_that_splits_far_past_the_earliest_split_gets_a_window_of_its_own() -> None:
    from orchestrator.analysis import text_split
    from orchestrator.analysis.results import Completion

    texts = ["x" * 400, "x" * 20 + "y" * 380, "x" * 300 + "z" * 100]
    completions = [Completion(name, "", 1, [], [], [], 0) for name in ("modal", "near", "far")]
    start, prefix = text_split.align(completions, texts)
    assert (start, prefix) == (20, "x" * 20)
    near, far = completions[1:]
    assert (near.split, near.text_start, far.split, far.text_start) == (20, 20, 300, 260)
    assert far.text == "x" * 40 + "z" * 100 and len(completions[0].text) == text_split.WIDEST_CHARS


def test_markdown_html_and_show_print_the_texts_and_say_why_there_is_no_top_k(
        tmp_path: Path) -> None:
    result = compare(record(tmp_path, slotted(3, {2: C, 3: B})))
    markdown = "\n".join(explorer_md.section(result))
    assert "first split at character 20 (signed on text)" in markdown and explorer_md.TEXT_SIGNED in markdown
    assert "Shared by all up to character 20: `Paris is the capital`" in markdown
    assert "| branch 2 (3) | 20 | 20 | **▶`. <b>big</b>`** |" in markdown
    assert "| branch 1 (3) | 31 | 20 | `␣of France.`**▶`⏎Yes`** |" in markdown  # an edge space made visible
    assert "| rank |" not in markdown and "no token or top-k difference" not in markdown
    page = explorer_html.section(result)
    assert '<span class="split"><b>.</b> &lt;b&gt;big&lt;/b&gt;</span>' in page and "<b>⏎</b>Yes" in page
    assert "no logprob chart" in page and "<svg" not in page and 'class="topk"' not in page and "http" not in page
    run = _run_dir(tmp_path, result)
    assert "t/p/conc: 3 signatures in 12, first split at character 20 (signed on text)" in show(run)
    printed = show_cell(run, "t/p/conc")
    assert explorer_md.TEXT_SIGNED in printed and "shared by all up to character 20: Paris is the capital" in printed
    assert ">>. <b>big</b>" in printed and " of France.>>⏎Yes" in printed and "took the same slots" in printed


def _run_dir(tmp_path: Path, result: Comparison) -> Path:
    """A run dir holding just the report.json that `show` reads."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"study": "s", "run_id": "r", **result.to_json()}))
    return run


def test_the_window_keeps_each_split_even_far_from_the_others() -> None:
    from orchestrator.analysis.alignment import window as _window

    assert _window([2, 30], 48) == [*range(0, 11), *range(26, 39)]  # two stretches, "…" between them
    assert _window([2, 12], 48) == list(range(0, 21))  # overlapping: one stretch
    assert _window([2, 16], 48) == list(range(0, 25))  # a gap of BEFORE or fewer is filled in
    assert _window([2, 10, 20, 30, 40], 48) == list(range(0, 39))  # at most WIDEST (40): the mark at 40 left out


def test_a_branch_that_ends_early_is_marked_where_it_ended(tmp_path: Path) -> None:
    rows = [lp_row(r, LONG[:6], {}) for r in range(5)] + [lp_row(r, LONG[:4], {}) for r in range(5, 8)]
    result = compare(record(tmp_path, rows))
    [cell] = result.explorer
    branch = cell.completions[1]
    assert (branch.split, branch.split_kind, branch.flip, branch.tokens) == (4, "token", None, LONG_TOKENS[:4])
    assert "| 4 | `t5` -0.1 | ** ◀ split** |" in "\n".join(explorer_md.section(result))
    assert '<td class="split" title="ended">∅</td>' in explorer_html.section(result)
    assert "t5  -0.1  | <- split" in show_cell(_run_dir(tmp_path, result), "a/p/conc")


def test_the_same_tokens_are_claimed_only_of_the_branches_read(result: Comparison) -> None:
    """A branch past the limit is not read: the line must not say that the cell's tokens never differ."""
    import dataclasses

    [cell] = [e for e in result.explorer if e.kind == "cell"][:1]
    branch = dataclasses.replace(cell.completions[1], split=0, split_kind="logprob", flip=None)
    alone = dataclasses.replace(cell, completions=[cell.completions[0], branch], more_branches=0)
    assert explorer_md.summary(alone).endswith("; the same tokens throughout")
    hidden = dataclasses.replace(alone, more_branches=3)
    assert explorer_md.summary(hidden).endswith(
        "; the same tokens throughout in the 1 branch(es) shown (3 more not read: compare RUN --branches K)")
