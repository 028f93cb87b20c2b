"""The hooked engine's digests without Transformers: row layouts, the hooks on a toy model, the store, the planted
batch-variant Linear. Against a real Transformers model, through `orchestrator run` and `locate`:
tests/e2e/test_locate.py."""

from __future__ import annotations

import gc
import re

import pytest
import torch
from hookedengine.app import plant_batch_variant
from hookedengine.bulk import digest
from hookedengine.digests import DigestStore, Recorder, RequestDigests
from hookedengine.rows import StepLayout, Target, rows


def test_rows_of_a_batched_a_flattened_and_a_shared_tensor() -> None:
    layout = StepLayout(0, batch=2, seq_len=3, window_ids=["a", "b"], targets={})
    tgt = Target(row=1, start=1, stop=3, context_tokens=2)
    batched = torch.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    got, start, stop, total = rows(batched, layout, tgt)
    assert (start, stop, total) == (4, 6, 6) and torch.equal(got, batched[1, 1:])
    flat = batched.reshape(6, 4)
    got, start, stop, total = rows(flat, layout, tgt)
    assert (start, stop, total) == (4, 6, 6) and torch.equal(got, batched[1, 1:])
    mixed = torch.ones(5, 4)  # e.g. MoE experts' rows, grouped by expert: the batch's tokens mixed
    got, start, stop, total = rows(mixed, layout, tgt)
    assert (start, stop, total) == (None, None, 5) and got is mixed
    alone = StepLayout(0, batch=1, seq_len=3, window_ids=["b"], targets={})
    got, start, stop, total = rows(mixed, alone, Target(row=0, start=0, stop=3, context_tokens=3))
    assert (start, stop, total) == (0, 5, 5)  # the forward holds only its tokens: its own


def test_a_call_on_mixed_rows_gives_no_input_digest_to_the_next() -> None:
    class Routed(torch.nn.Module):  # an expert's activation on the batch's tokens grouped by expert
        def __init__(self) -> None:
            super().__init__()
            self.act = torch.nn.SiLU()
            self.out = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            grouped = self.act(x.reshape(-1, 4)[torch.tensor([5, 0, 3, 1, 4, 2])][:5])
            return self.out(grouped)

    store, model = DigestStore(), Routed()
    rec = Recorder(model, head_values=2, store=store)
    got = _one_step(rec, store, model, torch.randn(2, 3, 4))
    act, out = got.calls
    assert act[2] == "act" and act[4:7] == (None, None, 5)
    assert out[2] == "out" and out[4:7] == (None, None, 5) and out[9:12] == (None, None, None)


def _one_step(rec: Recorder, store: DigestStore, model: torch.nn.Module, x: torch.Tensor,
              rid: str = "t") -> RequestDigests:
    """One prefill of a batch of 2 whose second row is the flagged request `rid`, and its digests."""
    with rec.attached([rid]):
        rec.begin_step(StepLayout(0, 2, 3, ["o", rid], {rid: Target(1, 0, 3, 3)}))
        model(x)
        rec.finish(rid)
    got = store.get(rid)
    assert got is not None
    return got


def test_a_target_rows_digest_is_its_own_whatever_else_is_in_the_batch() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(2, 3, 4)
    store = DigestStore()
    rec = Recorder(model, head_values=3, store=store)
    got = _one_step(rec, store, model, x)
    assert [c[2] for c in got.calls] == ["0", "1", "2"]
    assert got.steps == [{"step": 0, "batch_size": 2, "batch_request_ids": ["o", "t"], "context_tokens": 3}]
    first = got.calls[0]
    assert first[4:7] == (3, 6, 6) and first[7] == (2, 3, 4) and first[8] == (2, 3, 8)
    assert first[9] == digest(x[1], 0)[0]  # the input's own rows
    assert first[12] == digest(model[0](x)[1], 3)[0] and len(first[16]) == 3
    assert got.calls[1][9] == first[12]  # the next module's input is this one's output: the same digest
    other = x.clone()
    other[0] += 1  # another request's rows change; the target's digests do not (row-wise ops)
    again = _one_step(rec, store, model, other, "t2")
    assert [c[12] for c in again.calls] == [c[12] for c in got.calls]


class Nested(torch.nn.Module):
    """Two layers of two Linears each, named as a decoder's are: layers.0.up, layers.0.down, layers.0, ..."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Sequential() for _ in range(2))
        for layer in self.layers:
            layer.add_module("up", torch.nn.Linear(4, 8))
            layer.add_module("down", torch.nn.Linear(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def _digested(model: torch.nn.Module, x: torch.Tensor, **scope: object) -> list[tuple[object, ...]]:
    store = DigestStore()
    got = _one_step(Recorder(model, 3, store, **scope), store, model, x)  # type: ignore[arg-type]
    return [(c[2], *c[3:]) for c in got.calls]  # without the call's index, which counts the digested calls


def test_a_scope_digests_only_its_modules_with_the_digests_of_every_module_s_run() -> None:
    """--digest-depth and --digest-under: fewer hooks, the same digests for the modules they keep, bit for bit
    (docs/locate.md, "Inside a realistic load")."""
    torch.manual_seed(0)
    model, x = Nested(), torch.randn(2, 3, 4)
    every = {c[0]: c for c in _digested(model, x)}
    assert list(every) == ["layers.0.up", "layers.0.down", "layers.0", "layers.1.up", "layers.1.down", "layers.1"]
    layers = _digested(model, x, depth=2)
    assert [c[0] for c in layers] == ["layers.0", "layers.1"]
    inside = _digested(model, x, under="layers.1")
    assert [c[0] for c in inside] == ["layers.1.up", "layers.1.down", "layers.1"]
    for c in (*layers, *inside):
        assert c == every[c[0]], c[0]  # inputs digested from their own rows equal an earlier output's digest
    assert [c[0] for c in _digested(model, x, depth=2, under="layers.1")] == ["layers.1"]  # both limits
    with pytest.raises(ValueError, match=re.escape("--digest-under layers.7: no module of the model is in that scope; "
                                                   "its modules include layers, layers.0, layers.0.up")):
        Recorder(model, 3, DigestStore(), under="layers.7")


def test_a_packed_forward_gives_each_target_its_span_and_its_own_step() -> None:
    """Continuous batching: one row [1, T] of requests at different steps (a prefill beside a decode), and a
    request that joins the running batch (Recorder.add)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    store = DigestStore()
    rec = Recorder(model, head_values=2, store=store)
    alone = torch.randn(1, 3, 4)
    with rec.attached(["a"]):
        rec.begin_step(StepLayout(0, 1, 3, ["a"], {"a": Target(0, 0, 3, 3, step=0)}))
        model(alone)
        rec.add(["b"])
        packed = torch.cat([torch.randn(1, 1, 4), alone], dim=1)  # a's decode row, then b's prompt
        rec.begin_step(StepLayout(7, 1, 4, ["a", "b"], {"a": Target(0, 0, 1, 4, step=1),
                                                        "b": Target(0, 1, 4, 3, step=0)}))
        model(packed)
        rec.finish("a")
        rec.finish("b")
    a, b = store.get("a"), store.get("b")
    assert a is not None and b is not None
    assert [s["step"] for s in a.steps] == [0, 1] and [c[0] for c in a.calls] == [0, 1]
    assert b.steps == [{"step": 0, "batch_size": 2, "batch_request_ids": ["a", "b"], "context_tokens": 3}]
    assert b.calls[0][:7] == (0, 0, "0", "Linear", 1, 4, 4)
    assert b.calls[0][9] == a.calls[0][9]  # the same prompt rows, packed after another request's: the same input


def test_hooks_come_off_after_the_batch_and_an_unfinished_request_has_no_digests() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    store = DigestStore()
    rec = Recorder(model, head_values=1, store=store)
    with rec.attached(["t"]):
        pass
    assert not model[0]._forward_hooks
    assert store.get("t", wait_s=5) is None  # not left pending: a GET is answered 404 at once


def test_stored_digests_leave_the_garbage_collector_nothing_to_traverse() -> None:
    """A store of many requests' records costs every full collection nothing (docs/benchmarks.md, "Looking costs
    little, second pass"): once collected, no record, shape or first values is a tracked container."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    store = DigestStore()
    rec = Recorder(model, head_values=3, store=store)
    got = _one_step(rec, store, model, torch.randn(2, 3, 4))
    assert len(got.calls) == 2
    gc.collect()  # a collection untracks a tuple whose items it found untracked: its inner tuples first, then it
    gc.collect()
    assert not any(gc.is_tracked(c) or any(gc.is_tracked(v) for v in c) for c in got.calls)


def test_the_store_answers_404_for_unknown_ids_and_evicts_the_oldest() -> None:
    store = DigestStore(capacity=2)
    get = store.route(8)
    status, body = get("nope")
    assert status == 404 and "digest" in body["error"]["message"]
    store.expect(["a", "b", "c"])
    for rid in ("a", "b", "c"):
        store.put(rid, RequestDigests(steps=[{"step": 0}], calls=[]))
    assert get("a")[0] == 404
    status, body = get("c")
    assert status == 200 and body["request_id"] == "c" and body["head_values"] == 8


def test_the_planted_linear_splits_its_reduction_by_the_window_and_only_then() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.Linear(64, 8))
    x = torch.randn(5, 256)
    alone = model[0](x)
    window = [1]
    plant_batch_variant(model, "0", lambda: window[0])
    assert torch.equal(model[0](x), alone)  # a window of one: the module's own kernel
    window[0] = 4
    split = model[0](x)
    assert torch.allclose(split, alone, atol=1e-5) and not torch.equal(split, alone)


def test_planting_names_a_linear() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with pytest.raises(ValueError, match="not a Linear"):
        plant_batch_variant(model, "1", lambda: 1)
    with pytest.raises(ValueError, match="no such module"):
        plant_batch_variant(model, "nope", lambda: 1)
