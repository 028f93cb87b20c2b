"""Each nondeterminism switch: on -> the stated variation is detected; off -> bit-identical."""

from __future__ import annotations

import json

import pytest
import torch
from engines import distinct, greedy, make_engine, model_for, prompt_ids, signature
from refengine.autotune import cache_key
from refengine.model import TinyMoE
from refengine.tokenizer import EOS_ID


def test_weights_are_seeded() -> None:
    a = model_for(0, 1024)
    torch.manual_seed(123)  # the global RNG state must not matter
    c = TinyMoE(0, 1024, torch.device("cpu"), torch.float32)
    d = TinyMoE(1, 1024, torch.device("cpu"), torch.float32)
    assert torch.equal(a.lm_head, c.lm_head) and torch.equal(a.layers[1]["w2"], c.layers[1]["w2"])
    assert not torch.equal(a.lm_head, d.lm_head)


def test_greedy_output_is_varied_and_logprobs_spread() -> None:
    res = make_engine().run_batch([greedy(prompt_ids(80), max_tokens=64, logprobs=5)])[0]
    assert len(set(res.output_ids)) >= 16  # not a degenerate loop on one token
    top = res.logprobs[0].top
    assert top[0][1] - top[-1][1] > 0.05  # logprobs are not all near-equal


def test_defaults_repeatable_sequential() -> None:
    assert distinct(make_engine(), greedy(prompt_ids(60)), n=6) == 1


def test_fused_finalize_on_varies() -> None:
    assert distinct(make_engine(fused_finalize=True), greedy(prompt_ids(60)), n=6) >= 2


def test_fused_finalize_off_repeatable() -> None:
    assert distinct(make_engine(fused_finalize=False), greedy(prompt_ids(60)), n=6) == 1


@pytest.mark.parametrize("length", [40, 64])
def test_indexer_random_below_or_at_budget_repeatable(length: int) -> None:
    eng = make_engine(indexer_budget=64, topk_tiebreak="random")
    assert distinct(eng, greedy(prompt_ids(length)), n=6) == 1


def test_indexer_random_above_budget_varies() -> None:
    eng = make_engine(indexer_budget=64, topk_tiebreak="random")
    assert distinct(eng, greedy(prompt_ids(200)), n=6) >= 2


def test_indexer_stable_above_budget_repeatable() -> None:
    eng = make_engine(indexer_budget=64, topk_tiebreak="stable")
    assert distinct(eng, greedy(prompt_ids(200)), n=6) == 1


def test_indexer_sparse_differs_from_dense() -> None:
    sparse = make_engine(indexer_budget=64).run_batch([greedy(prompt_ids(200))])[0]
    dense = make_engine(indexer_budget=2048).run_batch([greedy(prompt_ids(200))])[0]
    assert signature(sparse) != signature(dense)


def test_indexer_generation_past_budget_from_short_prompt_repeatable() -> None:
    eng = make_engine(indexer_budget=64, topk_tiebreak="random")
    req = greedy(prompt_ids(40), max_tokens=60, logprobs=5, ignore_eos=True)
    assert 40 + 60 > 64
    assert distinct(eng, req, n=4) == 1


def test_indexer_default_budget_long_prompt() -> None:
    ids = prompt_ids(2500)
    rand = make_engine(max_model_len=4096, topk_tiebreak="random")
    assert rand.cfg.indexer_budget == 2048
    assert distinct(rand, greedy(ids, max_tokens=2), n=3) >= 2
    stable = make_engine(max_model_len=4096, topk_tiebreak="stable")
    assert distinct(stable, greedy(ids, max_tokens=2), n=2) == 1


def _batch_of_four(eng, target):
    others = [greedy(prompt_ids(60, salt=s)) for s in (7, 19, 31)]
    return eng.run_batch([target, *others])[0]


def test_batch_invariance_off_batch_differs_from_alone() -> None:
    eng = make_engine(batch_invariant=False)
    target = greedy(prompt_ids(60), max_tokens=6)
    alone = eng.run_batch([target])[0]
    assert signature(eng.run_batch([target])[0]) == signature(alone)  # alone is repeatable
    batched = _batch_of_four(eng, target)
    assert signature(batched) != signature(alone)
    assert signature(_batch_of_four(eng, target)) == signature(batched)  # fixed batch is repeatable


def test_batch_invariance_on_batch_equals_alone() -> None:
    eng = make_engine(batch_invariant=True)
    target = greedy(prompt_ids(60), max_tokens=6)
    alone = eng.run_batch([target])[0]
    assert signature(_batch_of_four(eng, target)) == signature(alone)
    identical = eng.run_batch([target] * 4)
    assert {signature(r) for r in identical} == {signature(alone)}


def test_moe_backends_differ_but_each_repeatable() -> None:
    sigs = {}
    for backend in ("auto", "flashinfer_cutlass", "triton", "cutlass"):
        eng = make_engine(moe_backend=backend)
        assert distinct(eng, greedy(prompt_ids(60)), n=2) == 1
        sigs[backend] = signature(eng.run_batch([greedy(prompt_ids(60))])[0])
    assert sigs["auto"] == sigs["flashinfer_cutlass"]  # same kernel
    assert sigs["triton"] != sigs["flashinfer_cutlass"]
    assert sigs["cutlass"] != sigs["flashinfer_cutlass"]


def test_backend_pin_changes_cache_key() -> None:
    auto = make_engine(moe_backend="auto").tuner
    pinned = make_engine(moe_backend="flashinfer_cutlass").tuner
    assert auto.resolved == pinned.resolved == "flashinfer_cutlass"
    assert auto.key != pinned.key
    assert cache_key("auto", "flashinfer_cutlass", "fused", "cpu", legacy=False) != cache_key(
        "auto", "flashinfer_cutlass", "unfused", "cpu", legacy=False
    )
    assert cache_key("auto", "flashinfer_cutlass", "fused", "cpu", legacy=True) == cache_key(
        "auto", "flashinfer_cutlass", "unfused", "cpu", legacy=True
    )


def test_autotune_cold_first_request_differs_then_warm_repeats(tmp_path) -> None:
    eng = make_engine(autotune_cache_dir=str(tmp_path))
    req = greedy(prompt_ids(60))
    cold = signature(eng.run_batch([req])[0])
    files = list(tmp_path.glob("*.json"))
    assert [f.name for f in files] == [f"{eng.tuner.key}.json"]
    entry = json.loads(files[0].read_text())
    assert entry["finalize"] == "unfused" and entry["tile"] != {"k_chunk": 32}
    warm = [signature(eng.run_batch([req])[0]) for _ in range(3)]
    assert len(set(warm)) == 1 and warm[0] != cold
    # A restart with the same dir loads the entry and is warm from its first request.
    again = make_engine(autotune_cache_dir=str(tmp_path))
    assert again.tuner.entry is not None and not again.tuner.pending
    assert signature(again.run_batch([req])[0]) == warm[0]
    # Without a cache dir the default tile is used throughout: equals the cold request.
    assert signature(make_engine().run_batch([req])[0]) == cold


def test_autotune_legacy_key_collision_makes_unfused_arm_nonrepeatable(tmp_path) -> None:
    req = greedy(prompt_ids(60))
    fused = make_engine(autotune_cache_dir=str(tmp_path), fused_finalize=True, autotune_legacy_key=True)
    fused.run_batch([req])  # tunes, writes an entry tuned under finalize=fused
    unfused = make_engine(autotune_cache_dir=str(tmp_path), fused_finalize=False, autotune_legacy_key=True)
    assert unfused.tuner.key == fused.tuner.key
    assert unfused.tuner.entry is not None and unfused.tuner.entry.finalize == "fused"
    assert distinct(unfused, req, n=6) >= 2
    # The fixed key includes the finalize mode: the unfused arm misses, tunes its own entry, repeats.
    fixed = make_engine(autotune_cache_dir=str(tmp_path), fused_finalize=False)
    assert fixed.tuner.key != fused.tuner.key and fixed.tuner.entry is None
    fixed.run_batch([req])
    assert distinct(fixed, req, n=4) == 1


def test_prompt_logprobs_do_not_change_sampled_path() -> None:
    eng = make_engine()
    plain = eng.run_batch([greedy(prompt_ids(60))])[0]
    with_plp = eng.run_batch([greedy(prompt_ids(60), prompt_logprobs=5)])[0]
    assert signature(plain) == signature(with_plp)
    assert with_plp.prompt_logprobs is not None and len(with_plp.prompt_logprobs) == 60


def test_sampling_seeded_repeatable() -> None:
    eng = make_engine()

    def run(seed):
        from refengine.engine import GenRequest

        r = GenRequest(prompt_ids=prompt_ids(30), max_tokens=24, temperature=1.0, seed=seed)
        return eng.run_batch([r])[0].output_ids

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_eos_stops_unless_ignored() -> None:
    eng = make_engine()
    # Force EOS by making it the only plausible token: bias the head temporarily.
    model = eng.model
    saved = model.lm_bias.clone()
    try:
        model.lm_bias[EOS_ID] = 100.0
        stop = eng.run_batch([greedy(prompt_ids(10), max_tokens=5)])[0]
        assert stop.finish_reason == "stop" and stop.output_ids == [EOS_ID]
        cont = eng.run_batch([greedy(prompt_ids(10), max_tokens=5, ignore_eos=True)])[0]
        assert cont.finish_reason == "length" and len(cont.output_ids) == 5
    finally:
        model.lm_bias.copy_(saved)
