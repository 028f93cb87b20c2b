"""Decode against prefill (analysis/decode_prefill.py, run/send/rescore.py, report/decode_prefill_md.py): an answer
beside the re-score of its own tokens, position by position; a planted disagreement is found where it is and nowhere
else, and what cannot be re-scored says why."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator import config
from orchestrator.analysis.decode_prefill import DecodePrefill, DecodePrefillCell, compare_answer, unobservable
from orchestrator.config.validate import validate
from orchestrator.engines import profile_for
from orchestrator.report import decode_prefill_md
from orchestrator.run.send import rescore

ANSWER = [65, 66, 67]
DECODE_LOGPROBS = [-0.1, -0.2, -0.3]


def _decode_top(keys: list[str]) -> list[list[dict[str, Any]]]:
    """Each position's top-2 as recorded: the answer's token first (greedy), then another."""
    return [[{"token": key, "logprob": lp}, {"token": "z", "logprob": lp - 1}]
            for key, lp in zip(keys, DECODE_LOGPROBS, strict=True)]


def _prefill(logprobs: list[float], rival: dict[int, float] | None = None) -> list[list[dict[str, Any]]]:
    """A re-score's entries for the answer's positions: the answer's token, and a rival token where `rival` says."""
    out = []
    for i, (token, lp) in enumerate(zip(ANSWER, logprobs, strict=True)):
        entries = [{"token_id": token, "token": chr(token), "logprob": lp}]
        if rival and i in rival:
            entries.append({"token_id": 90, "token": "Z", "logprob": rival[i]})
        out.append(entries)
    return out


@pytest.mark.parametrize("keys", [["token_id:65", "token_id:66", "token_id:67"], ["A", "B", "C"]],
                         ids=["token-id keys", "text keys"])
def test_decode_and_prefill_that_agree_show_no_disagreement(keys: list[str]) -> None:
    checks = compare_answer(ANSWER, DECODE_LOGPROBS, _decode_top(keys), _prefill(DECODE_LOGPROBS))
    assert [(c.position, c.argmax_agrees, c.abs_delta) for c in checks] == [(0, True, 0.0), (1, True, 0.0),
                                                                           (2, True, 0.0)]


def test_a_planted_disagreement_is_found_at_its_position_only() -> None:
    # position 1: the prefill ranks another token first, and gives the answer's token 0.5 less
    prefill = _prefill([-0.1, -0.7, -0.3], rival={1: -0.4})
    checks = compare_answer(ANSWER, DECODE_LOGPROBS, _decode_top(["token_id:65", "token_id:66", "token_id:67"]),
                            prefill)
    assert [c.argmax_agrees for c in checks] == [True, False, True]
    assert [c.abs_delta for c in checks] == pytest.approx([0.0, 0.5, 0.0])
    cell = DecodePrefillCell("arm", "p", "sequential")
    cell.add(checks)
    cell.add(compare_answer(ANSWER, DECODE_LOGPROBS, _decode_top(["A", "B", "C"]), _prefill(DECODE_LOGPROBS)))
    assert (cell.answers, cell.positions, cell.argmax_agree, cell.disagree_positions) == (2, 6, 5, [1])
    assert cell.argmax_share == pytest.approx(5 / 6)
    assert (cell.max_abs_delta, cell.max_delta_position) == (pytest.approx(0.5), 1)


def test_a_side_without_a_value_is_not_counted() -> None:
    checks = compare_answer(ANSWER, [float("nan"), -0.2, -0.3], None, [None, *_prefill(DECODE_LOGPROBS)[1:]])
    assert [(c.argmax_agrees, c.abs_delta) for c in checks] == [(None, None), (None, 0.0), (None, 0.0)]


def test_the_report_section_lists_each_cell_and_what_cannot_be_observed() -> None:
    agreeing = DecodePrefillCell("exact", "p", "sequential")
    disagreeing = DecodePrefillCell("defect", "p", "sequential")
    agreeing.add(compare_answer(ANSWER, DECODE_LOGPROBS, _decode_top(["A", "B", "C"]), _prefill(DECODE_LOGPROBS)))
    disagreeing.add(compare_answer(ANSWER, DECODE_LOGPROBS, _decode_top(["A", "B", "C"]),
                                   _prefill([-0.1, -0.7, -0.3], rival={1: -0.4})))
    found = DecodePrefill([agreeing, disagreeing], {"serve": "transformers_serve serves no prompt logprobs"})
    page = "\n".join(decode_prefill_md.section(found))
    assert "| exact | p | sequential | 1 | 100 % of 3 answer positions | none | 0 |" in page
    assert "| defect | p | sequential | 1 | 67 % of 3 answer positions | 1 | 0.5 (position 1) |" in page
    assert "- serve: not observable: transformers_serve serves no prompt logprobs" in page
    assert found.to_json()["cells"][1]["argmax_share"] == pytest.approx(2 / 3)
    assert decode_prefill_md.section(None) == []


def test_which_engines_can_be_re_scored() -> None:
    assert unobservable(profile_for("reference"), chat=False) is None
    assert unobservable(profile_for("vllm"), chat=False) is None
    assert unobservable(profile_for("transformers_hooked"), chat=False) is None
    assert unobservable(profile_for("transformers_serve"), chat=False) == "transformers_serve serves no prompt logprobs"
    assert "chat endpoint" in str(unobservable(profile_for("vllm"), chat=True))


def test_each_distinct_answer_is_re_scored_once_as_its_prompt_and_tokens() -> None:
    answers = rescore.Answers()
    row = {"role": "measured", "error": None, "prompt_id": "p", "start": 0}
    answers.observe([{**row, "token_ids": [7, 8], "sig_token_ids": "s1"},
                     {**row, "token_ids": [7, 8], "sig_token_ids": "s1"},
                     {**row, "token_ids": [9], "sig_token_ids": "s2"},
                     {**row, "token_ids": [5], "sig_token_ids": "s3", "error": "HTTP 500"},
                     {**row, "token_ids": [5], "sig_token_ids": "s4", "role": "warmup"},
                     {**row, "token_ids": [5], "sig_token_ids": "s5", "start": 1},
                     {"role": "measured", "error": None, "prompt_id": "p", "sig_token_ids": "s6"}])  # a resume's row
    assert answers.seen == {("p", "s1"): [7, 8], ("p", "s2"): [9]}
    proto = config.to_typed(config.compose(["protocol=smoke", "protocol.rescore=true"])).protocol
    groups = asyncio.run(rescore.requests(None, answers, {"p": [1, 2]}, proto, "m", profile_for("reference"),  # type: ignore[arg-type]
                                          {"return_token_ids": True}))
    [first], [second] = groups
    assert first.body == {"model": "m", "prompt": [1, 2, 7, 8], "max_tokens": 1, "temperature": 0.0,
                          "prompt_logprobs": 20, "return_token_ids": True}
    assert (first.request_id("A"), second.request_id("A")) == ("A/p/rescore/s1", "A/p/rescore/s2")
    assert (first.role, first.phase, second.body["prompt"]) == ("rescore", "rescore", [1, 2, 9])


def test_a_re_score_needs_the_answers_logprobs_and_the_completions_endpoint() -> None:
    typed = config.to_typed(config.compose(["protocol=smoke", "protocol.rescore=true",
                                            "protocol.request.logprobs=null"]))
    [problem] = [p for p in validate(typed) if "protocol.rescore" in p]
    assert "protocol.request.logprobs=1" in problem
    assert not [p for p in validate(config.to_typed(config.compose(["protocol=smoke", "protocol.rescore=true"])))
                if "protocol.rescore" in p]
