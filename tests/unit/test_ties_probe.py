"""The top-k tie probe (orchestrator/probes/ops_ties.py): the tie generator makes exactly the asked share of
rows tie at the k-th value and no other row; the stable-sort control breaks ties to the lowest index whatever
the batch; the per-row facts see a tie-break that changes; the bundle as shipped runs it, and its table."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from orchestrator import probes
from orchestrator.report.probes import render_markdown

torch = pytest.importorskip("torch")
from orchestrator.probes import ops_ties  # noqa: E402 (needs torch)


def scores(rows: int, experts: int, dtype: Any = None, seed: int = 0) -> Any:
    return torch.randn(rows, experts, generator=torch.Generator().manual_seed(seed)).to(dtype or torch.float32)


@pytest.mark.parametrize("share", [0.0, 0.01, 0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize(("experts", "k", "width", "dtype"), [
    (64, 2, 2, torch.float32), (257, 8, 2, torch.float32), (512, 8, 3, torch.bfloat16), (384, 2, 4, torch.float16),
    (257, 8, 2, torch.bfloat16)])  # bf16 over 257: a run of equal values across the k-th (seed 0, row 409)
def test_the_generator_ties_exactly_the_asked_share_at_the_kth_value(share: float, experts: int, k: int,
                                                                     width: int, dtype: Any) -> None:
    tied = ops_ties.place_ties(scores(1024, experts, dtype), k, share, width)
    assert tied.dtype == dtype
    flags = ops_ties.has_tie(tied, k)
    for m in (1, 3, 100, 400, 1024):  # every prefix holds ceil(m * share) tied rows: m * share where whole
        assert int(flags[:m].sum()) == math.ceil(m * share - 1e-9)
    assert int(flags[:400].sum()) == round(400 * share)
    top = torch.topk(tied.float(), k + width, dim=-1).values
    kth = top[:, k - 1:k]
    assert torch.equal((top[:, k:k + width - 1] == kth).all(-1), flags)  # width values at the k-th in tied rows
    assert bool((top[:, k + width - 1] < top[:, k - 1]).all())  # and no more
    assert bool((top[:, 1:k] < top[:, :k - 1]).all())  # nothing ties above the k-th: the order is the values'
    assert bool((top[~flags, k] < top[~flags, k - 1]).all())


def test_bad_tie_settings_name_the_valid_range() -> None:
    assert "tie_width >= 2" in str(ops_ties.tie_problem(8, 0.2, 1, 64))
    assert "top_k + tie_width - 1 < 8" in str(ops_ties.tie_problem(7, 0.2, 2, 8))
    assert "within 0..1" in str(ops_ties.tie_problem(2, 1.5, 2, 64))
    assert ops_ties.tie_problem(2, 0.5, 2, 64) is None


def test_the_stable_control_takes_the_lowest_index_among_ties_in_any_batch() -> None:
    x = ops_ties.place_ties(scores(64, 257), 8, 0.5, 3)
    values, indices = ops_ties.select(x, "stable_sort", 8)
    for row in range(64):  # the reference: by value descending, ties by index
        expected = sorted(range(257), key=lambda j: (-x[row, j].item(), j))[:8]
        assert indices[row].tolist() == expected
        assert torch.equal(ops_ties.select(x[row:row + 1], "stable_sort", 8)[1][0], indices[row])
    assert torch.equal(values, x.gather(1, indices))


def test_the_facts_count_rows_whose_tie_break_changes() -> None:
    """A selection that breaks ties to the highest index on repeats, where the first call broke them to the
    lowest: exactly the tied rows change set; the stable control, rerun, changes none."""
    x = ops_ties.place_ties(scores(40, 64), 2, 0.25)
    params = {"top_k": 2}
    first = ops_ties.select(x, "stable_sort", 2)

    def highest() -> Any:
        flipped = ops_ties.select(x.flip(-1), "stable_sort", 2)
        return flipped[0], 63 - flipped[1]
    moved = ops_ties._facts(x, "stable_sort", 40, params, highest, first, 3)
    assert moved["tie_rows"] == 10 and moved["set_differs_repeats"] == 10 and moved["order_differs_repeats"] >= 10
    steady = ops_ties._facts(x, "stable_sort", 40, params, lambda: ops_ties.select(x, "stable_sort", 2), first, 3)
    assert {k: v for k, v in steady.items() if k != "tie_rows"} == dict.fromkeys(
        ("set_differs_repeats", "order_differs_repeats", "set_differs_alone", "order_differs_alone",
         "set_differs_stable"), 0)


def _ops(spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", probes.bundle("ops"), "--spec", json.dumps(spec)],
                          capture_output=True, text=True, timeout=300, cwd="/")  # as shipped: no checkout


def test_the_bundle_runs_the_tie_probe_with_its_facts_and_table() -> None:
    spec = {"ops": {"t": {"op": "topk_ties", "experts": 257, "top_k": 8, "tie_share": 0.2}}, "m": [1, 5, 40],
            "repeats": 3, "hash_repeats": 1, "device": "cpu"}
    done = _ops(spec)
    assert done.returncode == 0, done.stderr[-2000:]
    cells = [r for r in map(json.loads, done.stdout.splitlines()) if r["kind"] == "cell"]
    assert {c["arm"] for c in cells} == {"topk_sorted", "topk_unsorted", "stable_sort"}
    for cell in cells:
        assert cell["tie_rows"] == math.ceil(cell["M"] * 0.2)
    stable = [c for c in cells if c["arm"] == "stable_sort"]
    assert all(c["set_differs_alone"] == c["set_differs_repeats"] == c["set_differs_stable"] == 0 for c in stable)
    text = render_markdown([{**c, "process": 1, "torch": "t"} for c in cells])
    assert "### top-k under ties" in text and "| t | stable_sort | 257 | 8 | 0.2 | fp32 | 40 | 8 (20%) | 0 |" in text


def test_a_tie_setting_out_of_range_is_refused_naming_the_range() -> None:
    done = _ops({"ops": {"t": {"op": "topk_ties", "experts": 64, "tie_share": 1.5}}, "device": "cpu"})
    assert done.returncode == 2 and "ops.t: tie_share 1.5 must be within 0..1" in done.stderr
    done = _ops({"ops": {"t": {"op": "moe_grouped_gemm", "tie_share": "many"}}, "device": "cpu"})
    assert done.returncode == 2 and "ops.t: a parameter is not a number" in done.stderr


def test_the_moe_and_sampling_probes_take_ties_and_the_unsorted_per_call_route() -> None:
    """Their `tie_share` ties exactly that share of rows at the k-th score; the MoE probe routes each call with
    the unsorted top-k on the device; left at their defaults, both draw and route as before."""
    from orchestrator.probes import ops_moe, ops_sampling

    gen = torch.Generator
    moe = {**ops_moe.DEFAULTS, "experts": 64, "top_k": 8, "hidden": 32, "intermediate": 16, "dtype": "fp32"}
    tied = ops_moe._prepare({**moe, "tie_share": 0.2}, 50, gen().manual_seed(0), torch.device("cpu"))
    assert int(ops_ties.has_tie(tied["scores"], 8).sum()) == 10
    before = ops_moe._prepare(moe, 50, gen().manual_seed(0), torch.device("cpu"))
    router = torch.randn(50, 64, generator=gen().manual_seed(0)) + torch.linspace(1.5, -1.5, 64)
    assert torch.equal(before["route"][1], torch.topk(torch.softmax(router, -1), 8, dim=-1).indices)
    per_call = {**moe, "tie_share": 0.2, "route": "per_call"}
    prepared = ops_moe._bind(tied, "per_expert_loop", 50, {**per_call, "route": "prepared"})()
    assert torch.equal(ops_moe._bind(tied, "per_expert_loop", 50, per_call)(), prepared)  # the same routing
    unsorted = ops_moe._bind(tied, "per_expert_loop", 50, {**per_call, "sorted": False})()
    assert torch.allclose(unsorted, prepared, atol=1e-5)  # the same experts, the slots summed in another order
    assert ops_moe._check({**moe, "route": "lazy"}) == ["route 'lazy' is not one of ['prepared', 'per_call']"]
    sampling = {**ops_sampling.DEFAULTS, "vocab": 1000, "top_k": 5}
    logits = ops_sampling._prepare({**sampling, "tie_share": 0.5}, 30, gen().manual_seed(0), torch.device("cpu"))
    assert logits.dtype == torch.bfloat16 and int(ops_ties.has_tie(logits, 5).sum()) == 15
    drawn = ops_sampling._prepare(sampling, 30, gen().manual_seed(0), torch.device("cpu"))
    assert torch.equal(drawn, (torch.randn(30, 1000, generator=gen().manual_seed(0)) * 4).to(torch.bfloat16))
