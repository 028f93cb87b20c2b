"""Digests of a flagged request's own rows at every module call: forward hooks, attached only while a batch holds
a flagged request, digest the target's rows of each module's first tensor argument and of its output as the
module returns (before a later in-place kernel can overwrite them): an exact byte hash, float64 sum, abs-max
and norm, and the first values. Every module, not only the leaves: attention and fused MoE experts compute in
the parent module itself (a function, 3-D weights), so their own call is where their split shows; calls come
in the order modules return (a parent after its children). Each request's digests are kept (a bounded store) for
GET /v1/digests/{id}; the wire format is docs/locate.md's."""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

STORE_REQUESTS = 512  # requests whose digests are kept; the oldest go first
PENDING_WAIT_S = 60.0  # how long a GET waits for a finished request's digests still being computed


@dataclass
class Target:
    """A flagged request in the current step: its row of the batch and its positions there, [start, stop) (a
    padded batch: from its left padding to the end; a packed one, all requests in one row: its span)."""

    row: int
    start: int
    stop: int
    context_tokens: int
    step: int | None = None  # its own step where a forward's requests are at different steps (continuous batching)


@dataclass
class StepLayout:
    """How a forward laid the batch out: `batch` rows of `seq_len` positions each."""

    step: int  # a target's step unless the target gives its own
    batch: int
    seq_len: int
    window_ids: list[str]  # the requests the scheduler took together (run as one batch, or each alone)
    targets: dict[str, Target]


@dataclass
class RequestDigests:
    steps: list[dict[str, Any]] = field(default_factory=list)
    calls: list[list[Any]] = field(default_factory=list)


def _rows(t: torch.Tensor, layout: StepLayout, tgt: Target) -> tuple[torch.Tensor, int | None, int | None, int]:
    """(the target's rows, start, stop, total) in the tensor's leading dimension, flattened over the dims that
    hold tokens: [B, L, ...] and [B*L, ...] hold per-request rows. Anything else is digested whole: the target's
    own where the forward holds only its tokens, else rows of the whole batch mixed (MoE experts' inputs, grouped
    by expert): start and stop None, as no request's own rows can be compared with another batch's."""
    b, n = layout.batch, layout.seq_len
    start, stop = tgt.row * n + tgt.start, tgt.row * n + tgt.stop
    if t.dim() >= 2 and t.shape[0] == b and t.shape[1] == n:
        return t[tgt.row, tgt.start:tgt.stop], start, stop, b * n
    if t.dim() >= 1 and t.shape[0] == b * n:
        return t[start:stop], start, stop, b * n
    total = int(t.shape[0]) if t.dim() else 1
    alone = b == 1 and tgt.start == 0 and tgt.stop == n
    return t, 0 if alone else None, total if alone else None, total


def _step(layout: StepLayout, tgt: Target) -> int:
    return layout.step if tgt.step is None else tgt.step


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        if value and isinstance(value[0], torch.Tensor):  # the common case, without a generator
            return value[0]
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def _digest(rows: torch.Tensor, head: int) -> tuple[str, float, float, float, list[float]]:
    """(blake2b-128 hex of the bytes, sum, abs-max, norm, first values)."""
    host = rows.detach().contiguous().cpu()
    raw = host.reshape(-1).view(torch.uint8).numpy().tobytes()
    wide = host.double().reshape(-1)
    if wide.numel() == 0:
        return hashlib.blake2b(raw, digest_size=16).hexdigest(), 0.0, 0.0, 0.0, []
    return (hashlib.blake2b(raw, digest_size=16).hexdigest(), float(wide.sum()), float(wide.abs().max()),
            float(wide.norm()), wide[:head].tolist())


class DigestStore:
    """Finished requests' digests, for the server's GET route (thread-safe: the digest worker writes, handlers
    read). A request whose digests are still being computed is `pending`: a GET waits for it."""

    def __init__(self, capacity: int = STORE_REQUESTS) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, RequestDigests] = OrderedDict()
        self._pending: set[str] = set()
        self._changed = threading.Condition()

    def expect(self, request_ids: list[str]) -> None:
        with self._changed:
            self._pending.update(request_ids)

    def put(self, request_id: str, digests: RequestDigests | None) -> None:
        """Its digests (None: it has none after all: the batch failed)."""
        with self._changed:
            self._pending.discard(request_id)
            if digests is not None:
                self._items[request_id] = digests
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
            self._changed.notify_all()

    def get(self, request_id: str, wait_s: float = PENDING_WAIT_S) -> RequestDigests | None:
        deadline = time.monotonic() + wait_s
        with self._changed:
            while request_id in self._pending and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return self._items.get(request_id)

    def route(self, head_values: int) -> Callable[[str], tuple[int, Any]]:
        """GET /v1/digests/{id} -> (status, body)."""
        def get(rest: str) -> tuple[int, Any]:
            request_id = rest.strip("/")
            found = self.get(request_id)
            if found is None:
                message = (f"No digests for request {request_id!r}: send it with \"digest\": true to an engine "
                           "with digests on (or it was evicted)")
                return 404, {"error": {"message": message, "type": "NotFoundError", "param": None, "code": 404}}
            return 200, {"request_id": request_id, "head_values": head_values, "steps": found.steps,
                         "calls": found.calls}
        return get


class _Call:
    """One module call of one target, its rows copied as the module returned; digested later by the worker."""

    __slots__ = ("digests", "meta", "out", "x", "x_from", "y")

    def __init__(self, digests: RequestDigests, meta: list[Any], x: torch.Tensor | None, x_from: _Call | None,
                 y: torch.Tensor) -> None:
        self.digests, self.meta, self.x, self.x_from, self.y = digests, meta, x, x_from, y
        self.out: tuple[str, float, float, float, list[float]] | None = None

    @property
    def mixed(self) -> bool:
        """Its output rows are the batch's, mixed (`_rows`): no digest of them stands for the request's input."""
        return self.meta[4] is None


class Recorder:
    """Hooks on every module of a model but the model itself, recording the current step's targets while
    attached. A hook only copies the target's rows (a device copy: the forward is not held up by a transfer or
    a hash); a worker thread digests them in call order and hands each finished request to the store."""

    def __init__(self, model: torch.nn.Module, head_values: int, store: DigestStore) -> None:
        self.modules = [(name, m) for name, m in model.named_modules() if name]
        self.head_values = head_values
        self.store = store
        self.layout: StepLayout | None = None
        self.call = 0
        self.open: dict[str, RequestDigests] = {}
        # The step's outputs by tensor identity: a module whose input is an earlier call's unchanged output
        # (most are) reuses that call's digest instead of copying the rows again.
        self._outputs: dict[int, tuple[torch.Tensor, int, dict[str, _Call]]] = {}
        # A step's calls go to the worker at once, when the step is over: one hand-over a step, not one a call
        # (each wakes the worker, which then takes the interpreter's lock from the forward).
        self._step_calls: list[_Call] = []
        self._work: queue.Queue[list[_Call] | tuple[str, RequestDigests | None]] = queue.Queue()
        threading.Thread(target=self._worker, name="hookedengine-digests", daemon=True).start()

    @contextmanager
    def attached(self, request_ids: list[str]) -> Iterator[None]:
        """Hooks on for one batch whose flagged requests are `request_ids`; removed after, also on error (a
        request not finished by then gets no digests)."""
        self.open = {rid: RequestDigests() for rid in request_ids}
        self.store.expect(request_ids)
        handles = [m.register_forward_hook(self._hook(name, type(m).__name__), with_kwargs=True)
                   for name, m in self.modules]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            self._end_step()
            self.layout = None
            for rid in list(self.open):
                self.open.pop(rid)
                self._work.put((rid, None))

    def add(self, request_ids: list[str]) -> None:
        """More flagged requests while attached: continuous batching's requests join a running batch."""
        for rid in request_ids:
            self.open.setdefault(rid, RequestDigests())
        self.store.expect(request_ids)

    def _end_step(self) -> None:
        if self._step_calls:
            self._work.put(self._step_calls)
            self._step_calls = []
        self._outputs.clear()

    def begin_step(self, layout: StepLayout) -> None:
        self._end_step()
        self.layout, self.call = layout, 0
        for rid, tgt in layout.targets.items():
            if rid in self.open:
                self.open[rid].steps.append({"step": _step(layout, tgt), "batch_size": len(layout.window_ids),
                                             "batch_request_ids": layout.window_ids,
                                             "context_tokens": tgt.context_tokens})

    def finish(self, request_id: str) -> None:
        """A target whose sequence ended: no longer recorded; its digests go to the store once computed."""
        digests = self.open.pop(request_id, None)
        if digests is not None:
            self._end_step()  # its last step's calls first
            self._work.put((request_id, digests))

    def _hook(self, name: str, kind: str) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            layout = self.layout
            if layout is None:
                return
            y = _first_tensor(output)
            if y is None:  # the model's own output object: nothing per row
                return
            call, self.call = self.call, self.call + 1
            x = _first_tensor(args) if args else _first_tensor(list(kwargs.values()))
            earlier = self._outputs.get(id(x)) if x is not None else None
            if earlier is not None and (earlier[0] is not x or earlier[1] != x._version):  # type: ignore[union-attr]
                earlier = None  # another tensor at a reused id, or changed in place since
            made: dict[str, _Call] = {}
            for rid, tgt in layout.targets.items():
                digests = self.open.get(rid)
                if digests is None:
                    continue
                out_rows, start, stop, total = _rows(y, layout, tgt)
                x_from = earlier[2].get(rid) if earlier is not None else None
                x_rows = None
                if x is not None and x_from is None and (picked := _rows(x, layout, tgt))[1] is not None:
                    x_rows = picked[0].detach().clone()
                meta = [_step(layout, tgt), call, name, kind, start, stop, total,
                        list(x.shape) if x is not None else None, list(y.shape)]
                made[rid] = item = _Call(digests, meta, x_rows, x_from, out_rows.detach().clone())
                self._step_calls.append(item)
            self._outputs[id(y)] = (y, y._version, made)

        return hook

    def _worker(self) -> None:
        while True:
            work = self._work.get()
            if isinstance(work, tuple):
                self.store.put(*work)
            else:
                for item in work:
                    self._digest_call(item)

    def _digest_call(self, item: _Call) -> None:
        item.out = _digest(item.y, self.head_values)
        if item.x_from is not None and item.x_from.out is not None and not item.x_from.mixed:
            inp: tuple[Any, ...] = item.x_from.out[:3]
        elif item.x is not None:
            inp = _digest(item.x, 0)[:3]
        else:
            inp = (None, None, None)
        item.digests.calls.append([*item.meta, *inp, *item.out])
        item.x = item.y = None  # type: ignore[assignment]  # the copies go as soon as digested
