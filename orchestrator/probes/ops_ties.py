"""Top-k under controlled tie density (issue 48, "the controlling variable is tie density at the k-th
threshold"): M rows of `experts` router scores in which a share `tie_share` of the rows has an exact tie AT
the k-th value (the k-th largest equals the next `tie_width - 1` values, so which of them is selected is the
top-k's tie-break) and every other row none (its top k + 1 values strictly decreasing). Arms: `topk_sorted`
(torch.topk, sorted=True), `topk_unsorted` (sorted=False: the seed's "above 256 experts") and `stable_sort`,
the seed's stable-sort fix as the control (torch.sort(stable=True), then the first k: ties go to the lowest
index, whatever the batch). Outputs: the selected values and indices.

Beyond the harness's digests, each cell counts rows (`facts`): `tie_rows` (measured on the input), rows whose
selected SET or its ORDER differs in any of the repeats from the first call, and rows whose set or order at
this M differs from the same row selected alone (M = 1), and rows whose set differs from the stable control's
(ties to the lowest index: which tie-break the arm has). `place_ties` also serves the MoE and sampling
probes' `tie_share`."""

from __future__ import annotations

import math
from typing import Any

import torch

from orchestrator.probes.harness import Call, OpKind, Output, bits, dtype_of


def tie_rows_wanted(m: int, share: float) -> int:
    """Rows among the first m that have a tie: ceil(m * share), so row 0 has one whenever share > 0 and any
    prefix holds the share exactly where m * share is whole."""
    return math.ceil(m * share - 1e-9)


def tie_problem(k: int, share: float, width: int, n: int) -> str | None:
    """Why these tie settings cannot be placed in rows of n values, or None."""
    if width < 2 or k < 1 or k + width - 1 >= n:
        return f"top_k {k} and tie_width {width} need 1 <= top_k, tie_width >= 2, top_k + tie_width - 1 < {n}"
    if not 0.0 <= share <= 1.0:
        return f"tie_share {share} must be within 0..1"
    return None


def _next_down(x: torch.Tensor) -> torch.Tensor:
    """The largest value of x's dtype below each x (its bits stepped; -0 and +0 go to minus the smallest)."""
    b = bits(x)
    stepped = torch.where(x > 0, b - 1, b + 1)
    tiny = torch.full_like(x, -torch.finfo(x.dtype).tiny)
    return torch.where(x == 0, tiny, stepped.view(x.dtype))


def place_ties(scores: torch.Tensor, k: int, share: float, width: int = 2) -> torch.Tensor:
    """`scores` ([rows, n], its dtype kept, on the CPU) with the top k + width values of every row made
    strictly decreasing (a value equal to the one above it is stepped down by one ulp; the rest held below
    them), then, in the rows `tie_rows_wanted` picks, the k-th value copied into the next width - 1: an exact
    tie at the k-th threshold. The other rows have no tie there, nor within their top k."""
    problem = tie_problem(k, share, width, scores.shape[-1])
    if problem:
        raise ValueError(problem)
    values, where = torch.sort(scores, dim=-1, descending=True, stable=True)
    for r in range(1, k + width):
        clash = values[:, r] >= values[:, r - 1]
        values[:, r] = torch.where(clash, _next_down(values[:, r - 1]), values[:, r])
    # a value below that range may now equal or pass a stepped one: keep it under the last
    values[:, k + width:] = torch.minimum(values[:, k + width:], _next_down(values[:, k + width - 1:k + width]))
    rows = torch.tensor([tie_rows_wanted(i + 1, share) > tie_rows_wanted(i, share) for i in range(scores.shape[0])])
    for r in range(k, k + width - 1):
        values[:, r] = torch.where(rows, values[:, k - 1], values[:, r])
    return torch.empty_like(scores).scatter_(-1, where, values)


def has_tie(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Per row: the k-th largest value equals the (k+1)-th (the selected set depends on the tie-break)."""
    top = torch.topk(scores.float(), k + 1, dim=-1).values
    return top[:, k - 1] == top[:, k]


def select(x: torch.Tensor, arm: str, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k values and indices of each row, as the arm selects them."""
    if arm == "stable_sort":
        values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
        return values[:, :k], indices[:, :k]
    top = torch.topk(x, k, dim=-1, sorted=arm == "topk_sorted")
    return top.values, top.indices


def _prepare(params: dict[str, Any], m_max: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    scores = torch.randn(m_max, int(params["experts"]), generator=gen).to(dtype_of(params))
    return place_ties(scores, int(params["top_k"]), float(params["tie_share"]), int(params["tie_width"])).to(device)


def _bind(scores: torch.Tensor, arm: str, m: int, params: dict[str, Any]) -> Call:
    x, k = scores[:m], int(params["top_k"])
    return lambda: select(x, arm, k)


def rows_differing(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of two [rows, k] index tensors: (the selected sets differ, the index sequences differ)."""
    sets = (a.sort(dim=-1).values != b.sort(dim=-1).values).any(-1)
    return sets, (a != b).any(-1)


def _facts(scores: torch.Tensor, arm: str, m: int, params: dict[str, Any], call: Call, first: Output,
           repeats: int) -> dict[str, Any]:
    k = int(params["top_k"])
    indices = first[1] if isinstance(first, tuple) else first
    set_rep = torch.zeros(m, dtype=torch.bool, device=indices.device)
    order_rep = set_rep.clone()
    for _ in range(1, repeats):
        again = call()
        sets, order = rows_differing(again[1] if isinstance(again, tuple) else again, indices)
        set_rep, order_rep = set_rep | sets, order_rep | order
    alone = torch.cat([select(scores[i:i + 1], arm, k)[1] for i in range(m)])
    set_alone, order_alone = rows_differing(alone, indices)
    set_stable = rows_differing(select(scores[:m], "stable_sort", k)[1], indices)[0]
    return {"tie_rows": int(has_tie(scores[:m], k).sum()),
            "set_differs_repeats": int(set_rep.sum()), "order_differs_repeats": int(order_rep.sum()),
            "set_differs_alone": int(set_alone.sum()), "order_differs_alone": int(order_alone.sum()),
            "set_differs_stable": int(set_stable.sum())}


def _check(params: dict[str, Any]) -> list[str]:
    problem = tie_problem(int(params["top_k"]), float(params["tie_share"]), int(params["tie_width"]),
                          int(params["experts"]))
    return [problem] if problem else []


DEFAULTS = {"experts": 256, "top_k": 8, "tie_share": 0.2, "tie_width": 2, "dtype": "fp32"}
OPS = {"topk_ties": OpKind(("topk_sorted", "topk_unsorted", "stable_sort"), DEFAULTS, _prepare, _bind,
                           lambda p: (int(p["experts"]), int(p["top_k"]), None), facts=_facts, check=_check)}
