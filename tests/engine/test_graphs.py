"""The simulated CUDA-graph capture (refengine/graphs.py): with the stale-step defect each decode step reads the
buffer a step behind, so answers depend on what ran before (nondeterminism) and differ from graph-off; with the
fix they are graph-off's, bit for bit; off by default."""

from __future__ import annotations

from engines import greedy, make_engine, prompt_ids, signature
from refengine.config import EngineConfig
from refengine.graphs import PAD_ID, CapturedDecode, captured_size


def test_a_replay_reads_the_previous_step_of_its_size_and_the_fix_its_own() -> None:
    stale, fixed = CapturedDecode(sync=False), CapturedDecode(sync=True)
    assert stale.replay_inputs([5, 6]) == [PAD_ID, PAD_ID]  # the capture's zeros
    assert stale.replay_inputs([7, 8]) == [5, 6]  # the previous step's tokens
    assert stale.replay_inputs([9]) == [PAD_ID]  # another captured size, another buffer
    assert stale.replay_inputs([1, 2, 3]) == [PAD_ID] * 3 and stale.replay_inputs([4, 4]) == [7, 8]
    assert stale.stale_reads == 5
    assert [fixed.replay_inputs(t) for t in ([5, 6], [7, 8], [9])] == [[5, 6], [7, 8], [9]]
    assert fixed.stale_reads == 0
    assert [captured_size(n) for n in (1, 2, 3, 4, 5, 16)] == [1, 2, 4, 4, 8, 16]


def test_off_by_default() -> None:
    assert not EngineConfig().cuda_graphs and not EngineConfig().graph_sync_fix
    assert make_engine().graphs is None


def test_the_defect_makes_a_request_depend_on_the_one_before_it() -> None:
    a, b = greedy(prompt_ids(60), max_tokens=8), greedy(prompt_ids(60, salt=7), max_tokens=8)
    on = make_engine(cuda_graphs=True)
    first, again = (signature(on.run_batch([a])[0]) for _ in range(2))
    after_b = [signature(on.run_batch([r])[0]) for r in (b, a)][1]
    assert first != again  # the first request after start read the capture's zeros; its repeat, its own last step
    assert again != after_b  # the same request after another one reads that one's leftovers
    off = signature(make_engine().run_batch([a])[0])
    assert off not in (first, again, after_b)  # every decode step read a stale token
    assert on.graphs is not None and on.graphs.stale_reads > 0


def test_the_fix_matches_graph_off_bit_for_bit_whatever_ran_before() -> None:
    a, b = greedy(prompt_ids(60), max_tokens=8), greedy(prompt_ids(60, salt=7), max_tokens=8)
    off = make_engine()
    fixed = make_engine(cuda_graphs=True, graph_sync_fix=True)
    want = [signature(r) for r in off.run_batch([a, b])]
    for batch in ([a, b], [b], [a, b], [a]):
        got = [signature(r) for r in fixed.run_batch(batch)]
        assert got == [want[[a, b].index(r)] for r in batch]
    assert fixed.graphs is not None and fixed.graphs.stale_reads == 0
