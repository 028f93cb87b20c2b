"""Top-1 flips per cell (issue 37, item 3: the seed's unit) and which rows form a cell under study.starts."""

from __future__ import annotations

from orchestrator.analysis.compare import FLIP_POSITIONS, compare
from tests.unit.test_compare import cell, record, row


def test_top1_flips_count_request_position_pairs_and_say_where(tmp_path) -> None:  # type: ignore[no-untyped-def]
    modal = [1, 2, 3, 4]
    rows = [row("a", "p", "seq", modal)] * 5 + [row("a", "p", "seq", [1, 2, 9, 8])] * 2
    rows += [row("a", "p", "seq", [1, 7, 3, 4]), row("a", "p", "seq", [1, 2, 3])]  # a flip; a shorter answer
    rows += [row("a", "q", "seq", [5, 6])] * 3
    result = compare(record(tmp_path, rows)).to_json()
    c = cell(result, "a", "p")
    # 2 requests flip at 2 and 3, one at 1; the shorter one has no token at 3: no top-1 there, no flip
    assert (c["top1_flips"], c["top1_flip_position_count"]) == (5, 3)
    assert [list(p) for p in c["top1_flip_positions"]] == [[1, 1], [2, 2], [3, 2]]
    assert c["divergent"] == 4 and c["first_divergent_position"] == 1
    same = cell(result, "a", "q")
    assert (same["top1_flips"], same["top1_flip_positions"], same["top1_flip_position_count"]) == (0, [], 0)


def test_top1_flips_against_the_modal_request_not_the_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("a", "p", "seq", [9, 9])] + [row("a", "p", "seq", [1, 2])] * 3
    c = cell(compare(record(tmp_path, rows)).to_json(), "a", "p")
    assert (c["top1_flips"], [list(p) for p in c["top1_flip_positions"]]) == (2, [[0, 1], [1, 1]])


def test_top1_flips_list_the_first_positions_and_count_the_rest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    length = FLIP_POSITIONS + 3
    rows = [row("a", "p", "seq", list(range(length)))] * 3 + [row("a", "p", "seq", [100 + t for t in range(length)])]
    c = cell(compare(record(tmp_path, rows)).to_json(), "a", "p")
    assert (c["top1_flips"], c["top1_flip_position_count"]) == (length, length)
    assert [list(p) for p in c["top1_flip_positions"]] == [[t, 1] for t in range(FLIP_POSITIONS)]


def test_top1_flips_on_token_strings_and_none_without_tokens(tmp_path) -> None:  # type: ignore[no-untyped-def]
    strings = [row("a", "p", "seq", [1, 2], token_ids=None, tokens=["x", "y"])] * 3
    strings += [row("a", "p", "seq", [1, 2], token_ids=None, tokens=["x", "z"])]
    bare = [row("a", "q", "seq", [1], token_ids=None, tokens=None, top_logprobs=None, sig_top_logprobs=None,
                sig_token_ids=None)] * 2
    result = compare(record(tmp_path, strings + bare)).to_json()
    assert (cell(result, "a", "p")["top1_flips"], cell(result, "a", "p")["top1_flip_positions"]) == (1, [(1, 1)])
    q = cell(result, "a", "q")
    assert (q["top1_flips"], q["top1_flip_positions"], q["top1_flip_position_count"]) == (None, None, None)


def test_a_later_starts_requests_are_in_no_cell(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # study.starts: start 0 runs the protocol; starts 1.. send one measured request each, compared apart
    rows = [row("a", "p", "seq", [1, 2], role="measured", start=0)] * 3
    rows += [row("a", "p", "seq", [1, 2], role="measured")]  # a null start is the first start
    rows += [row("a", "p", "seq", [5, 6], role="measured", start=s) for s in (1, 2)]
    rows += [row("a", "q", "seq", [3], role="measured", start=1)]
    result = compare(record(tmp_path, rows)).to_json()
    c = cell(result, "a", "p")
    assert (c["n"], c["divergent"], c["top1_flips"]) == (4, 0, 0)
    assert [x["prompt_id"] for x in result["cells"]] == ["p"]
