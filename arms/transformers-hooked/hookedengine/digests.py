"""Digests of a flagged request's own rows at every module call: forward hooks, attached only while a batch holds
a flagged request, digest the target's rows of each module's first tensor argument and of its output as the
module returned them (a later in-place kernel cannot change them: plan.py): an exact byte hash, float64 sum,
abs-max and norm, and the first values, taken a step at a time in blocks (plan.py, bulk.py). Every module, not
only the leaves: attention and fused MoE experts compute in the parent module itself (a function, 3-D weights), so
their own call is where their split shows; calls come in the order modules return (a parent after its children).
Each request's digests are kept (a bounded store) for GET /v1/digests/{id}; the wire format is docs/locate.md's."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from hookedengine.bulk import block_digests, to_host
from hookedengine.plan import Plan, Taken, make_plan, resolve
from hookedengine.rows import StepLayout, step_of

STORE_REQUESTS = 512  # requests whose digests are kept; the oldest go first
PLANS = 256  # step plans kept for reuse
logger = logging.getLogger(__name__)
PENDING_WAIT_S = 60.0  # how long a GET waits for a finished request's digests still being computed


@dataclass
class RequestDigests:
    steps: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        if value and isinstance(value[0], torch.Tensor):  # the common case, without a generator
            return value[0]
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


class DigestStore:
    """Finished requests' digests, for the server's GET route (thread-safe: the forward's thread writes, handlers
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


def scoped(model: torch.nn.Module, depth: int = 0, under: str | None = None) -> list[tuple[str, torch.nn.Module]]:
    """The modules digested: every one but the model itself, or those of at most `depth` dotted parts, or
    `under` and those inside it (both: either limit). Fewer modules, less Python a step (docs/locate.md, "Inside
    a realistic load"). A scope that leaves none raises ValueError naming modules it could take."""
    every = [(name, m) for name, m in model.named_modules() if name]
    kept = [(name, m) for name, m in every
            if (not depth or name.count(".") < depth) and (under is None or name == under
                                                           or name.startswith(f"{under}."))]
    if not kept:
        tops = ", ".join(name for name, _m in every if name.count(".") < 3)[:300]
        said = " and ".join(s for s in (f"--digest-depth {depth}" if depth else "",
                                        f"--digest-under {under}" if under else "") if s)
        raise ValueError(f"{said}: no module of the model is in that scope; its modules include {tops}")
    return kept


class Recorder:
    """Hooks on every module of a model but the model itself, recording the current step's targets while
    attached. A hook only keeps the call's tensors (no copy, no op); when the step ends, its targets' rows of
    every call are taken at once, stacked by shape (a few device ops a step), moved to the host in one transfer
    and digested block by block (bulk.py), on the forward's own thread: a worker thread would contend with the
    forward for the interpreter's lock, which its Python (hooks, modules, kernel launches) holds most of a step
    (docs/benchmarks.md, "Looking costs little"). A module whose tensors change in place after it returns (seen by
    their version counters, from the first step on, when every call is also copied at once) has its rows copied
    as it returns from then on."""

    def __init__(self, model: torch.nn.Module, head_values: int, store: DigestStore, depth: int = 0,
                 under: str | None = None) -> None:
        self.modules = scoped(model, depth, under)
        self.head_values = head_values
        self.store = store
        self.layout: StepLayout | None = None
        self.open: dict[str, RequestDigests] = {}
        self._taken: list[Taken] = []
        self._copied: set[str] | None = None  # modules copied as they return; None: all (the first step)
        self._plans: dict[tuple[object, ...], Plan] = {}  # by the step's geometry and its targets' rows

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
                self.store.put(rid, None)

    def add(self, request_ids: list[str]) -> None:
        """More flagged requests while attached: continuous batching's requests join a running batch."""
        for rid in request_ids:
            self.open.setdefault(rid, RequestDigests())
        self.store.expect(request_ids)

    def begin_step(self, layout: StepLayout) -> None:
        self._end_step()
        self.layout = layout
        for rid, tgt in layout.targets.items():
            if rid in self.open:
                self.open[rid].steps.append({"step": step_of(layout, tgt), "batch_size": len(layout.window_ids),
                                             "batch_request_ids": layout.window_ids,
                                             "context_tokens": tgt.context_tokens})

    def finish(self, request_id: str) -> None:
        """A target whose sequence ended: no longer recorded; its digests go to the store once computed."""
        if request_id in self.open:
            self._end_step()  # its last step's calls first
            self.store.put(request_id, self.open.pop(request_id))

    def _hook(self, name: str, kind: str) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            layout = self.layout
            if layout is None or not layout.targets:
                return
            y = output if type(output) is torch.Tensor else _first_tensor(output)
            if y is None:  # the model's own output object: nothing per row
                return
            x = _first_tensor(args) if args else _first_tensor(list(kwargs.values()))
            taken = Taken(name, kind, x, y)
            if self._copied is None or name in self._copied:
                taken.copy(layout, {rid: t for rid, t in layout.targets.items() if rid in self.open})
            self._taken.append(taken)

        return hook

    def _end_step(self) -> None:
        """The step's calls: each target's rows taken in blocks (its plan's) and digested."""
        taken, layout = self._taken, self.layout
        self._taken = []
        if not taken or layout is None:
            return
        changed, sig = resolve(taken)
        lost = {t.name for t in taken if t.copies is None and t.name in changed}
        if lost:
            logger.warning("digests: modules %s changed their tensors in place after returning: their digests of "
                           "this step are left out, and their rows are copied as they return from now on",
                           sorted(lost))
        self._copied = (self._copied or set()) | changed
        rids = [rid for rid in layout.targets if rid in self.open]
        if not rids:
            return
        targets = [layout.targets[rid] for rid in rids]
        key = (layout.batch, layout.seq_len, *((t.row, t.start, t.stop) for t in targets))
        plan = self._plans.get(key)
        if plan is None or plan.signature != sig or lost:
            plan = make_plan(taken, layout, targets, lost, sig)
            if not lost:
                if len(self._plans) >= PLANS:  # geometries seen (prompt widths, packed spans): a bounded cache
                    self._plans.clear()
                self._plans[key] = plan
        steps = [(self.open[rid], step_of(layout, t)) for rid, t in zip(rids, targets, strict=True)]
        none: tuple[None, ...] = (None,) * 5
        done = [block_digests(b, self.head_values) for b in to_host(plan.blocks(taken, rids))]
        for target, fields, out, inp in plan.calls:
            digests, step = steps[target]
            y = done[out[0]][out[1]] if out is not None else none
            x = done[inp[0]][inp[1]][:3] if inp is not None else none[:3]
            digests.calls.append((step, *fields, *x, *y))  # a tuple, as bulk.Digest says why
