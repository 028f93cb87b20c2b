"""Every comparison metric on small hand-built records with known answers."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.analysis import quality, stats
from orchestrator.analysis.compare import compare
from orchestrator.analysis.gaps import top_gaps
from orchestrator.analysis.gate import failures, gate_from_flags
from orchestrator.analysis.signatures import text_signature, token_ids_signature, top_logprobs_signature
from orchestrator.analysis.stats import distribution_test, pooled_bound
from orchestrator.errors import ConfigError, RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter


def row(arm: str, prompt: str, phase: str, ids: list[int], top1_lp: float = -0.1, top2_lp: float = -2.0,
        prompt_lp: list[list[tuple[int, float, int]] | None] | None = None, cold: bool = False,
        text: str | None = None, **extra: Any) -> dict[str, Any]:
    top = [[{"token": f"t{t}", "logprob": top1_lp}, {"token": "other", "logprob": top2_lp}] for t in ids]
    prompt_logprobs = None if prompt_lp is None else [
        None if p is None else [{"token_id": t, "token": None, "logprob": lp, "rank": r} for t, lp, r in p]
        for p in prompt_lp]
    text = text if text is not None else "".join(f"t{t}" for t in ids)
    return {"arm": arm, "prompt_id": prompt, "phase": phase, "phase_kind": extra.pop("kind", "sequential"),
            "batch_id": extra.pop("batch_id", 0), "cold": cold, "error": None, "completion_text": text,
            "token_ids": ids, "token_logprobs": [top1_lp] * len(ids), "top_logprobs": top, "top_gaps": top_gaps(top),
            "prompt_logprobs": prompt_logprobs, "sig_text": text_signature(text),
            "sig_token_ids": token_ids_signature(ids), "sig_top_logprobs": top_logprobs_signature(top), **extra}


def record(tmp_path, rows: list[dict[str, Any]]) -> RunPaths:  # type: ignore[no-untyped-def]
    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "responses", "r", flush_rows=3) as writer:
        for r in rows:
            writer.append(r)
    return paths


def cell(result: dict[str, Any], arm: str, prompt: str, phase: str = "seq") -> dict[str, Any]:
    [found] = [c for c in result["cells"] if (c["arm"], c["prompt_id"], c["phase"]) == (arm, prompt, phase)]
    return found


def test_identical_cell_and_cold_apart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("a", "p", "seq", [1, 2, 3], top1_lp=-0.5, cold=True)] + [row("a", "p", "seq", [1, 2, 3])] * 30
    result = compare(record(tmp_path, rows)).to_json()
    c = cell(result, "a", "p")
    assert (c["n"], c["distinct_signatures"], c["divergent"], c["first_divergent_position"]) == (30, 1, 0, None)
    assert c["upper_bound_95"] == pytest.approx(0.0950, abs=5e-5)
    assert result["cold"] == [{"arm": "a", "prompt_id": "p", "phase": "seq", "matches_warm": False}]


def test_a_part_that_holds_only_set_apart_rows_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The writer flushes every 3 rows here: the first part is the cold request and two warm-up requests.
    rows = [row("a", "p", "seq", [1, 2, 3], cold=True), *[row("a", "p", "seq", [1, 2, 3], role="warmup")] * 2,
            *[row("a", "p", "seq", [1, 2, 3])] * 4]
    result = compare(record(tmp_path, rows)).to_json()
    assert cell(result, "a", "p")["n"] == 4 and result["cold"][0]["matches_warm"] is True


def test_rows_set_apart_between_a_cells_rows_are_left_out_of_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Parts of 3 rows: a warm-up request of another prompt, then one of this prompt's own, sit between its measured
    # rows (cells are cut out of each part by slicing around them, not by filtering).
    measured = {"role": "measured"}
    rows = [row("a", "p", "seq", [1, 2, 3], **measured), row("a", "q", "seq", [7], role="warmup"),
            row("a", "p", "seq", [1, 2, 3], **measured), row("a", "p", "seq", [1, 2, 4], **measured),
            row("a", "p", "seq", [9, 9, 9], role="warmup"), row("a", "p", "seq", [1, 2, 3], **measured)]
    result = compare(record(tmp_path, rows)).to_json()
    c = cell(result, "a", "p")
    assert (c["n"], c["distinct_signatures"], c["divergent"], c["first_divergent_position"]) == (4, 2, 1, 2)
    assert [x["prompt_id"] for x in result["cells"]] == ["p"]


def test_first_divergent_position_and_near_tie(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("a", "p", "seq", [1, 2, 3], top2_lp=-0.1001)] * 4 + [row("a", "p", "seq", [1, 2, 9], top2_lp=-0.1001)]
    rows += [row("a", "q", "seq", [1, 2, 3])] * 4 + [row("a", "q", "seq", [1, 5, 3])]
    result = compare(record(tmp_path, rows)).to_json()
    near = cell(result, "a", "p")
    assert (near["distinct_signatures"], near["divergent"], near["first_divergent_position"]) == (2, 1, 2)
    assert near["top1_top2_gap"] == pytest.approx(1e-4) and near["near_tie"] is True
    far = cell(result, "a", "q")
    assert far["first_divergent_position"] == 1 and far["top1_top2_gap"] == pytest.approx(1.9)
    assert far["near_tie"] is False
    assert far["lower_bound_95"] == pytest.approx(0.00505, abs=1e-4)  # Clopper-Pearson, 1 in 5


def test_prompt_position_metrics(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Position 0 is null as served; position 1: forced token 7 (rank 2) first, top-2 = {5, 7};
    # position 2 in the last request: forced logprob differs by 0.25 and the top-1 flips.
    same = [None, [(7, -1.0, 2), (5, -0.5, 1)], [(8, -0.2, 1), (9, -1.5, 2)]]
    flipped = [None, [(7, -1.0, 2), (5, -0.5, 1)], [(8, -0.45, 2), (9, -0.4, 1)]]
    rows = [row("a", "p", "seq", [1], prompt_lp=same)] * 3 + [row("a", "p", "seq", [1], prompt_lp=flipped)]
    result = compare(record(tmp_path, rows)).to_json()
    c = cell(result, "a", "p")
    assert c["max_prompt_spread"] == pytest.approx(0.25)
    assert c["first_prompt_position_with_spread"] == 2
    assert c["min_top1_agreement"] == pytest.approx(0.75)
    assert c["min_topk_overlap"] == pytest.approx(1.0)  # the same two tokens, in another order
    [positions] = result["positions"]
    assert positions["prompt_spread"] == [None, 0.0, pytest.approx(0.25)]
    assert positions["top1_agreement"] == [None, 1.0, 0.75]


def test_schedules_and_pairs_say_where(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("base", "p", "seq", [1, 2, 3])] * 6 + [row("base", "p", "conc", [1, 2, 3], kind="concurrent")] * 6
    rows += [row("b", "p", "seq", [1, 2, 3])] * 6 + [row("b", "p", "conc", [1, 4, 3], kind="concurrent")] * 6
    result = compare(record(tmp_path, rows), baseline="base").to_json()
    schedules = {s["arm"]: (s["verdict"], s["first_divergent_position"]) for s in result["schedules"]}
    assert schedules == {"base": ("identical", None), "b": ("differ", 1)}
    pairs = {p["phase"]: (p["verdict"], p["first_divergent_position"], p["p_value"]) for p in result["pairs"]}
    # 6 against 6, one signature each: 2 of the C(12, 6) splits are as extreme
    assert pairs == {"seq": ("identical", None, None), "conc": ("differ", 1, pytest.approx(2 / 924))}


def noisy(arm: str, phase: str, counts: list[int], start: int = 0) -> list[dict[str, Any]]:
    """A cell whose requests show signature i (token 10 + i at position 1) counts[i] times, from `start` on in
    the order they come."""
    order = [i for i, count in enumerate(counts) for _ in range(count)]
    order = order[start:] + order[:start]
    return [row(arm, "p", phase, [1, 10 + i, 3]) for i in order]


def test_cells_with_the_same_signatures_in_the_same_proportions_are_one_distribution(  # type: ignore[no-untyped-def]
        tmp_path) -> None:
    """The H200's A/A of transformers serve with continuous batching: every signature with the same count on both
    sides (10, 9, 5, 3, 3, 3 and singletons of 64), in another order and with a tie for the modal one: the same
    distribution, not 'differ' (the old rule compared one completion picked from each)."""
    counts = [10, 10, 9, 5, 3, 3, 3] + [1] * 21
    rows = noisy("a", "seq", counts) + noisy("b", "seq", counts[1::-1] + counts[2:], start=17)
    rows += noisy("a", "conc", [2, 1]) + noisy("b", "conc", [4, 2])  # same proportions, twice the n
    result = compare(record(tmp_path, rows), baseline="a").to_json()
    assert {p["phase"]: (p["verdict"], p["test"], p["p_value"], p["first_divergent_position"])
            for p in result["pairs"]} == {"seq": ("same distribution", "", None, None),
                                          "conc": ("same distribution", "", None, None)}


def test_other_distributions_are_judged_by_an_exact_test(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = noisy("a", "seq", [8, 2]) + noisy("b", "seq", [2, 8])  # the same two signatures, swapped proportions
    rows += noisy("a", "conc", [5, 5]) + noisy("b", "conc", [6, 4])  # close: not shown to differ
    result = compare(record(tmp_path, rows), baseline="a").to_json()
    pairs = {p["phase"]: p for p in result["pairs"]}
    assert pairs["seq"]["verdict"] == "differ" and pairs["seq"]["test"] == "Fisher-Freeman-Halton exact test"
    assert pairs["seq"]["p_value"] == pytest.approx(0.02301, abs=1e-5)  # Fisher's exact test of [[8, 2], [2, 8]]
    assert pairs["conc"]["verdict"] == "no difference shown" and pairs["conc"]["p_value"] == pytest.approx(1.0)
    assert pairs["conc"]["first_divergent_position"] is None  # only where the cells differ


def _brute_force(a: list[int], b: list[int]) -> float:
    """The Fisher-Freeman-Halton p-value by listing every split of the pooled sample (small N only)."""
    import itertools
    import math

    labels = [j for j, c in enumerate(x + y for x, y in zip(a, b, strict=True)) for _ in range(c)]
    def weight(first: list[int]) -> int:
        return math.prod(math.comb(labels.count(j), first.count(j)) for j in set(labels))
    observed = weight([j for j, c in enumerate(a) for _ in range(c)])
    splits = [weight([labels[i] for i in chosen]) for chosen in itertools.combinations(range(len(labels)), sum(a))]
    return sum(1 for w in splits if w <= observed) / len(splits)


@pytest.mark.parametrize(("a", "b"), [([3, 0, 0, 0], [0, 1, 1, 1]), ([2, 0, 3, 0, 1], [0, 2, 0, 1, 0]),
                                      ([4, 1, 1, 0], [1, 2, 0, 3]),
                                      ([2, 2, 1, 1, 1], [1, 0, 3, 2, 0]), ([1, 9], [11, 3])])
def test_the_exact_test_against_every_split_and_its_permutation_estimate(
        a: list[int], b: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    exact = distribution_test(a, b)
    assert exact.method == "Fisher-Freeman-Halton exact test"
    assert exact.p_value == pytest.approx(_brute_force(a, b), rel=1e-12)
    if not any(x and y for x, y in zip(a, b, strict=True)):
        return  # no signature on both sides: counted exactly however many tables there are
    monkeypatch.setattr(stats, "EXACT_TABLES", 0)  # too many tables: estimated, with its number and seed
    estimate = distribution_test(a, b)
    assert estimate.method == "Fisher-Freeman-Halton test, 10000 permutations (seed 0)"
    assert estimate.p_value == pytest.approx(exact.p_value, abs=0.015)
    assert distribution_test(a, b) == estimate  # seeded: the same report twice


def test_a_pool_names_the_cells_the_stop_rule_ended(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("v", "p", "seq", [1])] * 40 + [row("v", "q", "seq", [1])] * 3 + [row("v", "q", "seq", [2])] * 2
    result = compare(record(tmp_path, rows), stop_after_divergences=2)
    [pool] = result.pooled
    assert (pool.cells, pool.n, pool.left_out) == (1, 40, ["v/q/seq"])


def test_missing_logprobs_fall_back_to_what_is_there(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No top logprobs: token ids sign the cell; neither: the text does; each says which it used."""
    no_top = {"sig_top_logprobs": None, "top_logprobs": None}
    rows = [{**row("a", "p", "seq", [1]), **no_top}] * 3
    rows += [{**row("t", "p", "seq", [1]), **no_top, "sig_token_ids": None, "token_ids": None}] * 2
    rows += [{**row("t", "p", "seq", [1]), **no_top, "sig_token_ids": None, "token_ids": None,
              "sig_text": "other", "completion_text": "other"}]
    result = compare(record(tmp_path, rows + [row("b", "p", "seq", [1])] * 3), baseline="b").to_json()
    a, t = cell(result, "a", "p"), cell(result, "t", "p")
    assert (a["signature_basis"], a["distinct_signatures"]) == ("token_ids", 1)
    assert "token ids" in a["signature_note"]
    assert (t["signature_basis"], t["distinct_signatures"], t["divergent"]) == ("text", 2, 1)
    assert "completion text" in t["signature_note"]
    pairs = {p["arm_b"]: (p["verdict"], p["compared_on"]) for p in result["pairs"]}
    # bases differ: compared on their texts; 2 of 3 like b's 3 of 3 is not shown to differ
    assert pairs == {"a": ("identical", "text"), "t": ("no difference shown", "text")}


def test_pooled_bound_states_its_assumption() -> None:
    pooled = pooled_bound([0] * 36, [30] * 36)
    assert pooled.n == 1080 and pooled.upper_bound_95 == pytest.approx(0.00277, abs=5e-6)
    assert "common divergence rate" in str(pooled.assumption)


def test_identical_wrong_answer_is_reported_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("a", "capital", "seq", [1], text=" Lyon")] * 3 + [row("a", "thai", "seq", [2], text="สวัสดีครับ")] * 2
    expect = {"capital": {"contains": "Paris"}, "thai": {"script": "Thai", "min_share": 0.9}}
    result = compare(record(tmp_path, rows), expectations=expect).to_json()
    wrong = cell(result, "a", "capital")
    assert wrong["distinct_completions"] == 1 and wrong["quality_pass"] == 0.0
    assert cell(result, "a", "thai")["quality_pass"] == 1.0
    assert quality.script_share("hello สวัสดี", "thai") == pytest.approx(6 / 11)


def test_non_contiguous_cells_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("a", "p", "seq", [1]), row("a", "q", "seq", [1]), row("a", "p", "seq", [1])]
    with pytest.raises(RecordError, match="not contiguous"):
        compare(record(tmp_path, rows))


def test_gate_failures(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [row("a", "p", "seq", [1])] * 6 + [row("b", "p", "seq", [2])] * 5 + [row("b", "p", "seq", [1])]
    result = compare(record(tmp_path, rows), baseline="a")  # [6, 0] against [1, 5]: p = 14 / 924
    assert failures(result, {"max_divergence_rate": 0.5, "expect_pairs": {"b": "differ"}}) == []
    problems = failures(result, {"max_divergence_rate": 0.0, "expect_pairs": {"b": "identical"}})
    assert problems == ["b/p/seq: 1 divergent in 6 exceeds the stated rate 0",
                        "pairs: b/p/seq is differ, expected identical"]


def test_a_gate_that_expects_agreement_takes_a_noisy_same_distribution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # An A/A of a noisy arm: the same two signatures in the same proportions on both sides.
    noisy = [row("a", "p", "seq", [1])] * 4 + [row("a", "p", "seq", [2])] * 2
    rows = noisy + [{**r, "arm": "b"} for r in noisy]
    result = compare(record(tmp_path, rows), baseline="a")
    assert [p.verdict for p in result.pairs] == ["same distribution"]
    assert failures(result, {"expect_pairs": {"b": "agree"}}) == []
    assert failures(result, {"expect_pairs": {"b": "identical"}}) == [
        "pairs: b/p/seq is same distribution, expected identical"]
    assert gate_from_flags(None, None, ["b=agree"], []) == {"expect_pairs": {"b": "agree"}, "expect_schedules": {}}
    with pytest.raises(ConfigError, match="ARM=identical, ARM=agree or ARM=differ"):
        gate_from_flags(None, None, ["b=same"], [])


def test_several_runs_compare_as_one_study(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first = record(tmp_path / "machine-a", [row("a", "p", "seq", [1, 2])] * 6)
    second = record(tmp_path / "machine-b", [row("a", "p", "seq", [1, 3])] * 6)
    result = compare([first, second], baseline="machine-a/a").to_json()
    assert {c["arm"] for c in result["cells"]} == {"machine-a/a", "machine-b/a"}
    [pair] = result["pairs"]
    assert (pair["arm_b"], pair["verdict"], pair["first_divergent_position"]) == ("machine-b/a", "differ", 1)


def test_token_strings_without_ids_find_what_ids_find(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Parts of 3 rows: the strings come dictionary-encoded per part, each part with its own dictionary.
    ids = [[1, 2, 3]] * 4 + [[1, 2, 9]] + [[1, 2, 3]] * 3 + [[1, 7, 3]]
    with_ids = [row("a", "p", "seq", i) for i in ids]
    strings_only = [row("a", "p", "seq", i, token_ids=None, tokens=[f"t{t}" for t in i]) for i in ids]
    by_ids = cell(compare(record(tmp_path / "ids", with_ids)).to_json(), "a", "p")
    by_strings = cell(compare(record(tmp_path / "strings", strings_only)).to_json(), "a", "p")
    assert by_strings["first_divergent_position"] == by_ids["first_divergent_position"] == 1
    assert by_strings == by_ids


def test_token_codes_of_dictionary_strings_equal_those_of_plain_strings() -> None:
    import numpy as np
    import pyarrow as pa

    from orchestrator.analysis.positions import token_codes

    plain = pa.chunked_array([pa.array([["b", "a"], ["a", "c"]]), pa.array([["c", "b"], None, ["d"]])])
    encoded = pa.chunked_array([c.cast(pa.list_(pa.dictionary(pa.int32(), pa.string()))) for c in plain.chunks])
    no_ids = pa.nulls(5, pa.list_(pa.int64()))
    assert np.array_equal(token_codes(no_ids, encoded), token_codes(no_ids, plain))
    assert token_codes(no_ids, plain).tolist() == [[0, 1], [1, 2], [2, 0], [-1, -1], [3, -1]]


def test_off_reference_counts_against_the_arms_sequential_answer_not_the_modal_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Four of a batch of six take the other answer: against the modal answer (now the other) two diverge,
    against the arm's sequential answer four do. The cold request is the reference without a sequential phase."""
    base, other = [1, 2, 3], [1, 2, 9]
    rows = [row("a", "p", "seq", base, cold=True, role="cold")] + [row("a", "p", "seq", base)] * 3
    rows += [row("a", "p", "conc", base, kind="concurrent")] * 2 + [row("a", "p", "conc", other, kind="concurrent")] * 4
    rows += [row("b", "p", "conc", base, kind="concurrent", cold=True, role="cold")]
    rows += [row("b", "p", "conc", base, kind="concurrent")] * 2 + [row("b", "p", "conc", other, kind="concurrent")] * 4
    result = compare(record(tmp_path, rows)).to_json()
    conc = cell(result, "a", "p", "conc")
    assert conc["divergent"] == 2 and (conc["off_reference"], conc["off_reference_of"], conc["reference"]) == (
        4, 6, "sequential")
    seq = cell(result, "a", "p", "seq")
    assert (seq["off_reference"], seq["off_reference_of"]) == (0, 2)  # its first request is the reference
    cold = cell(result, "b", "p", "conc")
    assert (cold["off_reference"], cold["off_reference_of"], cold["reference"]) == (4, 6, "cold")


def test_the_first_logprob_difference_is_placed_where_no_token_flips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    same = row("a", "p", "seq", [1, 2, 3])
    apart = {**same, "token_logprobs": [-0.1, -0.1, -0.2], "sig_top_logprobs": "another"}
    result = compare(record(tmp_path, [same] * 3 + [apart])).to_json()
    found = cell(result, "a", "p")
    assert found["divergent"] == 1 and found["first_divergent_position"] is None
    assert found["first_logprob_position"] == 2
