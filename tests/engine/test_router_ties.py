"""The router's top-k under ties (--router-tie-share, kernels.router_topk): off by default, ties exactly at
the k-th expert in about the asked share of rows, the stable tie-break repeatable and batch-free, the random
one varying only in tied rows and more often the more rows tie."""

from __future__ import annotations

import pytest
import torch
from engines import distinct, greedy, make_engine, prompt_ids
from refengine.cli import build_parser, config_from_args
from refengine.kernels import router_topk, tie_scores, tied_rows

K, EXPERTS = 4, 8


def probs(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, EXPERTS, generator=torch.Generator().manual_seed(seed)) * 2, dim=-1)


def test_off_by_default_and_without_ties_it_is_the_plain_topk() -> None:
    assert config_from_args(build_parser().parse_args([])).router_tie_share == 0.0
    p = probs(64)
    for tiebreak in ("stable", "random"):
        weights, experts = router_topk(p, K, 0.0, tiebreak)
        plain = p.topk(K, dim=-1)
        assert torch.equal(weights, plain.values) and torch.equal(experts, plain.indices)


def test_a_share_outside_0_to_1_is_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--router-tie-share", "1.5"])


@pytest.mark.parametrize("share", [0.01, 0.05, 0.2, 0.5])
def test_tied_rows_tie_exactly_at_the_kth_expert_in_about_the_share(share: float) -> None:
    p = probs(4000)
    tied = tied_rows(p, share)
    assert abs(tied.float().mean().item() - share) < 0.02
    top = tie_scores(p, K, share).topk(K + 1, dim=-1).values
    assert torch.equal(top[:, K - 1] == top[:, K], tied)  # a tie at the k-th value in those rows, in no other


def test_the_stable_tie_break_takes_the_lowest_expert_index_in_any_batch() -> None:
    p = probs(500)
    _, experts = router_topk(p, K, 0.5, "stable")
    for i in range(0, 500, 37):
        alone = router_topk(p[i:i + 1], K, 0.5, "stable")[1]
        assert torch.equal(alone[0], experts[i])
    tied = tied_rows(p, 0.5)
    order = p.sort(dim=-1, descending=True, stable=True).indices
    rivals = torch.stack([order[:, K - 1], order[:, K]], -1)  # the two experts at the k-th value in tied rows
    lowest = rivals.min(-1).values
    assert torch.equal(experts[tied, K - 1], lowest[tied])


def test_the_random_tie_break_varies_in_tied_rows_only_and_more_with_more_ties() -> None:
    p = probs(2000)
    changed = []
    for share in (0.05, 0.5):
        first = router_topk(p, K, share, "random")[1].sort(-1).values
        moved = torch.zeros(len(p), dtype=torch.bool)
        for _ in range(8):
            moved |= (router_topk(p, K, share, "random")[1].sort(-1).values != first).any(-1)
        assert not (moved & ~tied_rows(p, share)).any()
        changed.append(moved.float().mean().item())
    assert 0 < changed[0] < changed[1]


def test_the_engine_diverges_with_random_ties_and_not_with_stable_ones() -> None:
    request = greedy(prompt_ids(40), max_tokens=6)
    assert distinct(make_engine(router_tie_share=0.2, topk_tiebreak="random"), request, n=4) > 1
    assert distinct(make_engine(router_tie_share=0.2, topk_tiebreak="stable"), request, n=4) == 1
