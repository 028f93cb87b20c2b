"""The digests taken per step in blocks (issue 48: looking costs little) are those of the per-call path they
replaced, bit for bit: `Reference` below is that path (each call's rows copied as the module returns and digested
alone, `bulk.digest` being its digest verbatim), run on the same model and inputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from hookedengine.bulk import SERIAL_MAX, block_digests, digest, to_host
from hookedengine.digests import DigestStore, Recorder, _first_tensor
from hookedengine.rows import StepLayout, Target, rows, step_of


class Reference:
    """The per-call path: a hook copies the target's rows of each call and digests them alone."""

    def __init__(self, model: torch.nn.Module, head: int) -> None:
        self.head, self.calls, self.layout = head, [], StepLayout(0, 1, 1, [], {})
        self.calls: list[list[Any]] = []
        self.outputs: dict[int, tuple[torch.Tensor, int, list[Any]]] = {}
        for name, m in model.named_modules():
            if name:
                m.register_forward_hook(self._hook(name, type(m).__name__), with_kwargs=True)

    def begin_step(self, layout: StepLayout) -> None:
        self.layout, self.call, self.outputs = layout, 0, {}

    def _hook(self, name: str, kind: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            y = _first_tensor(output)
            if y is None:
                return
            call, self.call = self.call, self.call + 1
            x = _first_tensor(args) if args else _first_tensor(list(kwargs.values()))
            earlier = self.outputs.get(id(x)) if x is not None else None
            if earlier is not None and (earlier[0] is not x or earlier[1] != x._version):  # type: ignore[union-attr]
                earlier = None
            tgt = self.layout.targets["t"]
            out_rows, start, stop, total = rows(y, self.layout, tgt)
            if earlier is not None:
                inp = earlier[2][12:15] if earlier[2][4] is not None else [None] * 3
            elif x is not None and (picked := rows(x, self.layout, tgt))[1] is not None:
                inp = list(digest(picked[0].clone(), 0)[:3])
            else:
                inp = [None] * 3
            record = [step_of(self.layout, tgt), call, name, kind, start, stop, total,
                      list(x.shape) if x is not None else None, list(y.shape), *inp,
                      *digest(out_rows.clone(), self.head)]
            self.calls.append(record)
            self.outputs[id(y)] = (y, y._version, record)

        return hook


class Block(torch.nn.Module):
    """Kwargs calls, a tuple output, an input that is no module's output (a view), outputs their parent changes in
    place after they return (one the next module's input), rows of the batch mixed (grouped by expert)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(2 * width, width)
        self.expert = torch.nn.Linear(width, width)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(input=hidden)
        h.add_(0.25)  # `up`'s input is `norm`'s output changed since it returned: digested on its own
        u = self.act(self.up(h))
        u.mul_(0.5)  # the parent changes `act`'s output in place: its digest is of the rows as they were
        d = self.down(u[..., :])
        routed = self.expert(d.reshape(-1, d.shape[-1]).flip(0)[1:])  # the batch's rows, mixed
        return hidden + d + routed.sum() * 1e-3, u


class Toy(torch.nn.Module):
    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, width)
        self.blocks = torch.nn.ModuleList([Block(width), Block(width)])
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h)[0]
        return self.head(h[:, -1:])  # a view of the last position


def _steps(batch: int) -> list[tuple[StepLayout, torch.Tensor]]:
    """A left-padded prefill of 5 positions, then 3 decode steps, the target in row 1."""
    gen = torch.Generator().manual_seed(1)
    out = [(StepLayout(0, batch, 5, ["o", "t"], {"t": Target(1, 2, 5, 3)}), torch.randint(0, 100, (batch, 5),
                                                                                          generator=gen))]
    out += [(StepLayout(s, batch, 1, ["o", "t"], {"t": Target(1, 0, 1, 3 + s)}), torch.randint(0, 100, (batch, 1),
                                                                                                generator=gen))
            for s in range(1, 4)]
    return out


@pytest.mark.parametrize("vocab", [48, SERIAL_MAX + 100])  # the head's rows reduced in bulk, and one by one
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_bulk_digests_are_the_per_call_digests_bit_for_bit(vocab: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Toy(vocab, 16).to(dtype)
    reference = Toy(vocab, 16).to(dtype)
    reference.load_state_dict(model.state_dict())
    ref = Reference(reference, head=4)
    store = DigestStore()
    rec = Recorder(model, head_values=4, store=store)
    with torch.no_grad(), rec.attached(["t"]):
        for layout, ids in _steps(batch=3):
            rec.begin_step(layout)
            ref.begin_step(layout)
            model(ids)
            reference(ids)
        rec.finish("t")
    got = store.get("t")
    assert got is not None and len(got.calls) == len(ref.calls) == 4 * 14
    assert json.dumps(got.calls) == json.dumps(ref.calls)  # as the client reads them: the same JSON, bit for bit
    assert any(c[4] is None for c in got.calls) and any(c[9] is None for c in got.calls)  # mixed rows were there
    assert [c[2] for c in got.calls[:3]] == ["embed", "blocks.0.norm", "blocks.0.up"]


def test_a_block_s_rows_are_digested_as_each_row_alone() -> None:
    gen = torch.Generator().manual_seed(2)
    for m in (0, 1, 7, 300, SERIAL_MAX, SERIAL_MAX + 1):
        block = torch.randn(3, m, generator=gen) * torch.logspace(-6, 3, max(m, 1))[:m]
        assert block_digests(block, 5) == [digest(block[i], 5) for i in range(3)]


def test_blocks_packed_for_one_transfer_come_back_as_they_were() -> None:
    """An accelerator's blocks travel as one buffer of bytes (each block's place aligned for its dtype)."""
    blocks = [torch.randn(3, 5), torch.arange(7).reshape(1, 7), torch.randn(2, 3).to(torch.bfloat16),
              torch.zeros(1, 0), torch.tensor([[True, False, True]])]
    back = to_host(blocks, packed=True)
    assert [(b.dtype, b.shape) for b in back] == [(b.dtype, b.shape) for b in blocks]
    assert all(torch.equal(a, b) for a, b in zip(back, blocks, strict=True))
    assert [block_digests(b, 2) for b in back] == [block_digests(b, 2) for b in blocks]
