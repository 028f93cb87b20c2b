"""The planted decode-only defect (--decode-defect): an answer re-scored as a prompt (prompt logprobs, one
prefill) gives the decode steps' logprobs back within 1e-4 without it, and disagrees with them with it; the
first token, sampled from the prefill's last position, agrees either way."""

from __future__ import annotations

from refengine import cli
from refengine.engine import GenRequest

from tests.engine.engines import greedy, make_engine, prompt_ids

TOLERANCE = 1e-4  # what separates a reduction's rounding (fp32 on the CPU) from the defect's bfloat16 partials


def _deltas(decode_defect: bool) -> list[float]:
    """|decode logprob - prefill logprob| of each answer token, over a few prompts and batch sizes."""
    engine = make_engine(decode_defect=decode_defect, batch_invariant=False)
    out: list[float] = []
    for size in (1, 3):
        prompts = [prompt_ids(24, salt=5 * i) for i in range(size)]
        answers = engine.run_batch([greedy(p, max_tokens=12) for p in prompts])
        for prompt, answer in zip(prompts, answers, strict=True):
            rescore = GenRequest(prompt_ids=prompt + answer.output_ids, max_tokens=1, prompt_logprobs=1)
            prefill = engine.run_batch([rescore])[0].prompt_logprobs
            assert prefill is not None
            for i, position in enumerate(answer.logprobs):
                at = prefill[len(prompt) + i]
                assert at is not None and at.token_id == position.token_id
                out.append(abs(position.logprob - at.logprob))
    return out


def test_without_the_defect_decode_and_prefill_agree() -> None:
    assert max(_deltas(False)) <= TOLERANCE


def test_with_the_defect_decode_positions_disagree_but_the_first() -> None:
    deltas = _deltas(True)
    per_answer = [deltas[i:i + 12] for i in range(0, len(deltas), 12)]
    assert all(d[0] <= TOLERANCE for d in per_answer)  # the prefill's own token
    assert all(max(d[1:]) > 10 * TOLERANCE for d in per_answer)


def test_the_flag_reaches_the_config() -> None:
    assert cli.config_from_args(cli.build_parser().parse_args(["--decode-defect"])).decode_defect
    assert not cli.config_from_args(cli.build_parser().parse_args([])).decode_defect
