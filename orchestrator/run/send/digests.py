"""The activation digests of an arm's flagged requests (`protocol.request.digests`, docs/locate.md): after each
phase, before the next one starts (the engine keeps only its profile's `digest_capacity` latest), and once its
requests are done, before it is stopped, each flagged request that got an answer is fetched from the engine (its
profile's digests path, the answer's own id) and lands in the `digests` table, one row per (step, module call), a
request at a time: memory holds one request's digests, never the arm's. A fetch that fails is one warning line
and the arm's `digests_note`, never a failed arm: the completions are recorded already. `check` refuses a phase
that flags more requests than the engine keeps (`capacity_problems`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.config.arms import ResolvedArm
from orchestrator.config.schema import Config
from orchestrator.engines import EngineProfile
from orchestrator.engines.stream import assembled, is_sse
from orchestrator.errors import counted
from orchestrator.record.paths import RunPaths
from orchestrator.run.send import protocol
from orchestrator.run.send.protocol import DIGEST_FIELD
from orchestrator.run.send.sender import RunContext
from orchestrator.run.wire.client import CompletionClient

if TYPE_CHECKING:
    from orchestrator.record.tables import TableWriter

# A flagged body as `response_row` records it (json.dumps, sort_keys): a cheap test before parsing it
_MARK = json.dumps({DIGEST_FIELD: True})[1:-1]
# The fields of one call as the engine lists them, in order (docs/locate.md, "The hooked engine")
CALL_FIELDS = ("step", "call", "module", "module_type", "rows_start", "rows_stop", "rows_total", "in_shape",
               "out_shape", "in_hash", "in_sum", "in_absmax", "out_hash", "out_sum", "out_absmax", "out_norm",
               "out_head")
_INTS = ("step", "call", "rows_start", "rows_stop", "rows_total")
_FLOATS = ("in_sum", "in_absmax", "out_sum", "out_absmax", "out_norm")


@dataclass(frozen=True)
class Flagged:
    request_id: str  # the orchestrator's, as in responses
    attempt: int
    phase: str
    engine_request_id: str | None  # the answer's "id"; None: the answer named none


class DigestFetch:
    """Told of every `responses` row (`noting`), it keeps the flagged requests that got an answer; `fetch` then
    asks the engine for each one's digests not fetched yet and writes them (after each phase, and at the end)."""

    def __init__(self, ctx: RunContext, engine: EngineProfile, paths: RunPaths) -> None:
        self.ctx, self.path, self.paths = ctx, engine.endpoints.digests, paths
        self.flagged: list[Flagged] = []  # noted, not fetched yet
        self.fetched = 0  # asked for so far
        self.failed: list[str] = []  # "request_id: why" of those that could not be had

    def noting(self, then: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
        """The responses writer's `on_row`: note the row, then tell `then` (progress) of it."""
        def on_row(row: dict[str, Any]) -> None:
            self.note(row)
            if then is not None:
                then(row)
        return on_row

    def note(self, row: dict[str, Any]) -> None:
        if row["http_status"] == 200 and flagged(row["request_json"]):
            self.flagged.append(Flagged(row["request_id"], row["attempt"], row["phase"],
                                        engine_request_id(row["response_body"])))

    async def fetch(self, client: CompletionClient, say: Callable[[str], None]) -> str | None:
        """The digests of every request noted since the last fetch into the record, those that could not be had
        said as one warning; the arm's note of all that could not be had so far (None: every one was)."""
        todo, self.flagged = self.flagged, []
        if not todo:
            return self.note_text()
        from orchestrator.record.tables import TableWriter  # pyarrow: loaded by now (run/prefetch.py)

        failed: list[str] = []
        with TableWriter(self.paths, "digests", self.ctx.arm, flush_rows=4096, flush_s=3600) as writer:
            for request in todo:
                if (why := await self._one(client, request, writer)) is not None:
                    failed.append(f"{request.request_id}: {why}")
        self.fetched += len(todo)
        self.failed += failed
        if failed:
            phases = ", ".join(dict.fromkeys(r.phase for r in todo))
            say(f"warning: digests of {len(failed)} of {len(todo)} flagged requests of phase {phases} not recorded "
                f"(first: {failed[0]}); locate has none for them")
        return self.note_text()

    def note_text(self) -> str | None:
        """The arm's `digests_note`: how many of the flagged requests fetched so far have no digests, and why
        the first (None: none failed)."""
        if not self.failed:
            return None
        return (f"digests of {len(self.failed)} of {self.fetched} flagged requests not recorded (first: "
                f"{self.failed[0]}); locate has none for them")

    async def _one(self, client: CompletionClient, request: Flagged, writer: TableWriter) -> str | None:
        """One request's digests written; why not, where they were not."""
        if self.path is None:
            return "its engine serves no digests"
        if request.engine_request_id is None:
            return "its answer names no id to fetch them by"
        exchange = await client.request("GET", self.path.replace("{request_id}", request.engine_request_id))
        if exchange.status != 200:
            return f"{exchange.error or 'no answer'}: {error_message(exchange.body)}"
        base = {"study": self.ctx.study, "run_id": self.ctx.run_id, "arm": self.ctx.arm,
                "request_id": request.request_id, "attempt": request.attempt,
                "engine_request_id": request.engine_request_id}
        try:
            rows = list(digest_rows(json.loads(exchange.body), base))
        except (ValueError, TypeError, KeyError) as exc:  # the whole request or none: no partial digests
            return f"its digests are malformed ({type(exc).__name__}: {exc})"
        writer.extend(rows)  # a request's digests whole: a stop leaves all of them to be written, or none
        return None


def error_message(body: bytes) -> str:
    """What an engine's error answer says: its JSON error's message ({"error": {"message"}}, {"error": "..."},
    {"detail": "..."}), else the start of its text."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error")
        for said in (error.get("message") if isinstance(error, dict) else error, doc.get("message"),
                     doc.get("detail")):
            if isinstance(said, str) and said:
                return said
    text = body.decode("utf-8", "replace").strip()
    return (text[:200] + ("..." if len(text) > 200 else "")) or "an empty answer"


def capacity_problems(config: Config, arms: Mapping[str, ResolvedArm]) -> list[str]:
    """With protocol.request.digests on, a phase that flags more requests than an arm's engine keeps: their
    digests are fetched after the phase, and by then the engine has dropped the oldest. One line per phase."""
    if not config.protocol.request.digests:
        return []
    kept = {name: resolved.profile.digest_capacity for name, resolved in arms.items()
            if resolved.profile.capabilities.digests and resolved.profile.digest_capacity is not None}
    if not kept:
        return []
    smallest = min(kept.values())
    prompts = {prompt_id: prompt_id for prompt_id in config.prompts.prompts}
    per_phase = Counter(request.phase for group in protocol.plan(config.protocol, "m", prompts)
                        for request in group if request.body.get(DIGEST_FIELD) is True)
    found = []
    for phase, count in per_phase.items():
        if count > smallest:
            over = ", ".join(f"'{name}'" for name, capacity in kept.items() if count > capacity)
            found.append(f"protocol.phases.{phase} flags {count} requests for their digests "
                         f"(protocol.request.digests), more than the {smallest} the engine of arm(s) {over} keeps: "
                         f"the oldest would be gone before the phase's fetch; make it at most {smallest} "
                         f"({counted(len(prompts), 'prompt')} x fewer repeats or batches), or split it into phases")
    return found


def missing_note(paths: RunPaths, arm: str) -> str | None:
    """The arm's `digests_note` as its run recorded it (the start that ran the protocol): which flagged
    requests have no digests, and why; None where every one was fetched, or none was asked for."""
    from orchestrator.record.tables import read_table

    rows = read_table(paths, "arms", columns=["arm", "start", "digests_note"]).to_pylist()
    notes = [r["digests_note"] for r in rows if r["arm"] == arm and not r["start"] and r["digests_note"]]
    return "; ".join(dict.fromkeys(notes)) or None


def flagged(request_json: str | None) -> bool:
    """Whether a recorded request body asked for its digests."""
    if not request_json or _MARK not in request_json:
        return False
    body = json.loads(request_json)
    return isinstance(body, dict) and body.get(DIGEST_FIELD) is True


def engine_request_id(body: bytes) -> str | None:
    """The answer's "id" (a streamed answer's, from its events), as the engine names the request."""
    try:
        doc = json.loads(assembled(body) if is_sse(body) else body)
    except ValueError:
        return None
    value = doc.get("id") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and value else None


def digest_rows(doc: Any, base: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The engine's answer ({request_id, head_values, steps, calls}) as `digests` rows: each call with its
    step's batch (size, requests, context tokens). Raises ValueError/TypeError/KeyError where it is malformed."""
    if not isinstance(doc, dict) or not isinstance(doc.get("calls"), list):
        raise ValueError("no list of calls")
    steps = {_int(s["step"]): s for s in doc.get("steps") or []}
    for entry in doc["calls"]:
        if not isinstance(entry, list) or len(entry) != len(CALL_FIELDS):
            raise ValueError(f"a call of {len(entry) if isinstance(entry, list) else type(entry).__name__} "
                             f"fields, not {len(CALL_FIELDS)}")
        call = dict(zip(CALL_FIELDS, entry, strict=True))
        step = steps.get(_int(call["step"])) or {}
        ids = step.get("batch_request_ids")
        yield {**base, **{k: _int(call[k]) for k in _INTS}, **{k: _float(call[k]) for k in _FLOATS},
               "module": _str(call["module"]), "module_type": _str(call["module_type"]),
               "in_shape": _listed(call["in_shape"], _int, "a shape"),
               "out_shape": _listed(call["out_shape"], _int, "a shape"),
               "in_hash": _str(call["in_hash"]), "out_hash": _str(call["out_hash"]),
               "out_head": _listed(call["out_head"], _float, "a list of values"),
               "batch_size": _int(step.get("batch_size")), "context_tokens": _int(step.get("context_tokens")),
               "batch_request_ids": None if ids is None else [_str(i) for i in ids]}


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _str(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


V = TypeVar("V")


def _listed(value: Any, item: Callable[[Any], V], what: str) -> list[V] | None:
    """A JSON list of items (a shape, the first values), each checked by `item`; None stays None."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not {what}")
    return [item(v) for v in value]
