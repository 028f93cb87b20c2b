"""Sending a protocol to one running arm and recording every request: one `responses` row per request,
also for those an engine that died never got. An engine that dies mid-protocol, or an arm that gets no
successful answer at all, fails the arm (EngineFailure, exit 4); the report says where and why."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.analysis import signatures
from orchestrator.analysis.gaps import top_gaps
from orchestrator.analysis.stopping import StopRule
from orchestrator.engines import EngineProfile, profile_for
from orchestrator.errors import EngineFailure, counted
from orchestrator.record.failures import ErrorKind
from orchestrator.run.progress import STOPPED
from orchestrator.run.send import protocol
from orchestrator.run.send.flush import PrefixFlush
from orchestrator.run.wire.client import CompletionClient, Exchange

if TYPE_CHECKING:
    from orchestrator.record.tables import TableWriter


@dataclass(frozen=True)
class RunContext:
    study: str
    run_id: str
    arm: str
    significant_digits: int
    attempt: int = 0  # `run --resume`: 1 for the first re-send, and so on
    start: int = 0  # study.starts: a later start's rows (run/send/starts.py) are ARM/PROMPT/start/S, in no cell


def response_row(ctx: RunContext, request: protocol.Request, exchange: Exchange, prompt: str,
                 engine: EngineProfile | None = None) -> dict[str, Any]:
    """One `responses` row: what was sent, exactly what came back, what it parsed to (in the dialect of the
    arm's engine profile, `engine`), its signatures."""
    parsed = (engine or profile_for(None)).parse(exchange.body) if exchange.status is not None else None
    mismatch = protocol.prompt_token_check(request.body, parsed.prompt_tokens) if parsed else None
    errors = [e for e in (exchange.error, parsed.error if parsed else None, mismatch) if e]
    top = parsed.top_logprobs if parsed else None
    return {
        "study": ctx.study, "run_id": ctx.run_id, "arm": ctx.arm, "prompt_id": request.prompt_id,
        "phase": request.phase, "phase_kind": request.phase_kind.value, "batch_id": request.batch_id,
        "repeat": request.repeat, "request_index": request.request_index, "cold": request.cold,
        "request_id": f"{ctx.arm}/{request.prompt_id}/start/{ctx.start}" if ctx.start else request.request_id(ctx.arm),
        "attempt": ctx.attempt, "role": request.role, "start": ctx.start,
        "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(), "prompt_chars": len(prompt),
        "prompt_tokens": parsed.prompt_tokens if parsed else None,
        "cached_prompt_tokens": parsed.cached_prompt_tokens if parsed else None,
        "request_json": json.dumps(request.body, ensure_ascii=False, sort_keys=True),
        "response_body": exchange.body, "http_status": exchange.status,
        "error": "; ".join(errors) or None,
        "error_kind": exchange.error_kind if exchange.error else ErrorKind.ANSWER if errors else None,
        "send_ns": exchange.send_ns, "recv_ns": exchange.recv_ns,
        "completion_text": parsed.completion_text if parsed else None,
        "finish_reason": parsed.finish_reason if parsed else None,
        "completion_tokens": parsed.completion_tokens if parsed else None,
        "token_ids": parsed.token_ids if parsed else None, "tokens": parsed.tokens if parsed else None,
        "token_logprobs": parsed.token_logprobs if parsed else None, "top_logprobs": top,
        "top_gaps": top_gaps(top),
        "top_logprobs_entries": None if top is None else [None if p is None else len(p) for p in top],
        "prompt_logprobs": parsed.prompt_logprobs if parsed else None,
        "server_arrival_ns": parsed.server_arrival_ns if parsed else None,
        "server_first_step": parsed.server_steps[0] if parsed and parsed.server_steps else None,
        "server_last_step": parsed.server_steps[1] if parsed and parsed.server_steps else None,
        "sig_text": signatures.text_signature(parsed.completion_text) if parsed and not errors else None,
        "sig_token_ids": signatures.token_ids_signature(parsed.token_ids) if parsed and not errors else None,
        "sig_top_logprobs": signatures.top_logprobs_signature(top, ctx.significant_digits)
        if parsed and not errors else None,
        "sig_logprob_vector": signatures.logprob_vector_signature(parsed.token_logprobs, top)
        if parsed and not errors else None,
    }


# The role of a request cut off by Ctrl-C or SIGTERM: in no cell, not an error of its cell (docs/record.md);
# `run --resume` sends it again.
INTERRUPTED = "interrupted"


def _failed(row: dict[str, Any]) -> bool:
    """No HTTP answer, or a server error: the engine may have died."""
    return row["http_status"] is None or row["http_status"] >= 500


@dataclass(frozen=True)
class Server:
    """The arm's server as its sender watches it: the profile that parses its answers, where it says it is
    healthy and (for the running-requests gauge) its metrics, and whether its process has exited."""

    engine: EngineProfile
    health_path: str
    metrics_path: str | None
    exit_code: Callable[[], int | None]


class SendHooks(Protocol):
    """What the sender tells the arm's run as it goes."""

    def say(self, text: str) -> None: ...

    def before_group(self, group: list[protocol.Request]) -> None:
        """Before a group is sent (overlapped starts wait here)."""

    def skipped(self, group: list[protocol.Request], why: str) -> None:
        """A group a rule leaves unsent (progress counts it out); `why`: the setting that did."""

    async def phase_over(self, client: CompletionClient) -> None:
        """Between phases, once a phase's rows are written (send/digests.py)."""


class GroupRule(Protocol):
    """A rule that decides, from the rows recorded so far, how a later group is sent: a series' point's rate
    (send/series.py), a further window of a warm-up extended until steady (send/extension.py)."""

    skipped_because: str  # what progress says of the groups it leaves unsent

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None: ...

    def resolve(self, group: list[protocol.Request]) -> list[protocol.Request] | None:
        """The group as it is sent; None: not sent."""


class ProtocolSender:
    def __init__(self, ctx: RunContext, prompts: Mapping[str, str], writer: TableWriter, server: Server,
                 hooks: SendHooks, stop: StopRule | None = None, rules: Sequence[GroupRule] = (),
                 flush: PrefixFlush | None = None) -> None:
        self.ctx, self.prompts, self.writer, self.stop, self.rules = ctx, prompts, writer, stop, rules
        self.flush = flush  # protocol.flush_prefix_cache (send/flush.py)
        self.server, self.hooks, self.engine = server, hooks, server.engine
        self.traced = False  # the engine traces its requests (server_* fields): exact co-residency, no sampling

    async def send(self, client: CompletionClient, groups: list[list[protocol.Request]]) -> int:
        """Every group in order, but those of a cell the stop rule has ended (no row: not sent); returns how
        many requests were sent."""
        total, sent, answered, last_said = sum(len(g) for g in groups), 0, 0, time.monotonic()
        first_error: str | None = None
        for position, group in enumerate(groups):
            if position and group[0].phase != groups[position - 1][0].phase:
                await self.hooks.phase_over(client)
            resolved: list[protocol.Request] | None = group
            why = STOPPED if self._ended(group) else None
            for rule in self.rules:  # a series' point's rate; a further window, or none
                if why is None and resolved is not None and (resolved := rule.resolve(resolved)) is None:
                    why = rule.skipped_because
            if why is not None or resolved is None:
                self.hooks.skipped(group, why or STOPPED)
                continue  # checked between groups only: a concurrent batch is never cut
            group = resolved
            if self.flush is not None:
                try:
                    await self.flush.before(client, group)
                except EngineFailure as exc:
                    self._not_sent([g for g in groups[position:] if not self._ended(g)], f"not sent: {exc}")
                    raise
            self.hooks.before_group(group)
            # Once answers carry the engine's trace, /metrics is not sampled: the trace is exact, and polling
            # every few ms would load the very engine whose batch it observes.
            metrics = None if self.traced or not self.engine.running_metric else self.server.metrics_path
            try:
                if group[0].window is not None:  # a load phase's window (run/send/load_window.py)
                    from orchestrator.run.send.load_window import send_window

                    rows = await send_window(client, group, metrics, self.server.health_path, self.engine,
                                             lambda r, e: response_row(self.ctx, r, e, self._text(r), self.engine))
                else:
                    result = await protocol.send_group(client, group, metrics, self.server.health_path,
                                                       running_requests=self.engine.running_requests)
            except BaseException:  # Ctrl-C (a cancelled task) mid-group: its requests were sent; each gets a row.
                # A load window cut short is not used in part (its cost is a whole window's): none of its
                # answers is kept, and `run --resume` sends it again whole.
                self._not_sent([group], "interrupted: sent, but the answer was not received before the stop"
                               if group[0].window is None else
                               "interrupted: its load window was cut short by the stop; run --resume sends it again",
                               INTERRUPTED)
                raise
            if group[0].window is None:
                rows = [response_row(self.ctx, request, exchange, self._text(request), self.engine)
                        for request, exchange in zip(group, result.exchanges, strict=True)]
            self.traced = self.traced or any(row["server_first_step"] is not None for row in rows)
            if len(group) > 1 and group[0].window is None:
                arrival_spread, together = protocol.server_view(rows)
                for row in rows:
                    row.update(batch_send_spread_ns=result.send_spread_ns, batch_running_max=result.running_max,
                               batch_arrival_spread_ns=arrival_spread, batch_server_together=together)
            if self.stop is not None:
                self.stop.observe(rows)
            for rule in self.rules:
                rule.observe(rows)
            if group[0].window is not None:
                self.writer.append_whole(rows)  # a window is whole or absent in the record, even after kill -9
            else:
                for row in rows:
                    self.writer.append(row)
            answered += sum(row["error"] is None for row in rows)
            first_error = first_error or next((row["error"] for row in rows if row["error"]), None)
            sent += len(group)
            failing = next((i for i, row in enumerate(rows) if _failed(row)), None)
            if failing is not None and await self._dead(client):
                self._not_sent([g for g in groups[position + 1:] if not self._ended(g)],
                               f"not sent: the engine had died (request {sent} of {total})")
                index = sent - len(group) + failing + 1
                raise EngineFailure(f"the engine died at request {index} of {total} "
                                    f"({group[0].phase}/{group[0].prompt_id}): {rows[failing]['error']}"
                                    f"{self._status()}; {counted(total - sent, 'request')} not sent")
            if time.monotonic() - last_said >= 10:
                self.hooks.say(f"{sent}/{counted(total, 'request')}")
                last_said = time.monotonic()
        if total and not answered:
            raise EngineFailure(f"no successful response: all {total} requests failed (first: {first_error})")
        return sent

    def _ended(self, group: list[protocol.Request]) -> bool:
        """The group's cell was ended by the stop rule: it is not sent, and gets no row (a load window holds
        every cell's probes, and the traffic around them: it is always sent)."""
        first = group[0]
        return self.stop is not None and first.role == protocol.MEASURED and first.window is None and \
            self.stop.stopped(first.prompt_id, first.phase)

    def _text(self, request: protocol.Request) -> str:
        """The prompt a request carries: the study's, or a load phase's background prompt."""
        if request.window is not None and request.body is not request.window.probes.get(request.prompt_id):
            return request.window.text(request.prompt_id)
        return self.prompts[request.prompt_id]

    async def _dead(self, client: CompletionClient) -> bool:
        """Exited, or its health endpoint no longer answers 200 (vLLM: 503 once the engine core is gone)."""
        if self.server.exit_code() is not None:
            return True
        health = await client.request("GET", self.server.health_path)
        return health.status != 200

    def _status(self) -> str:
        code = self.server.exit_code()
        return "" if code is None else f"; it exited with status {code}"

    def _not_sent(self, groups: list[list[protocol.Request]], reason: str, role: str | None = None) -> None:
        """A row per request without an answer; `role`: instead of the request's (INTERRUPTED)."""
        now = time.time_ns()
        for group in groups:
            for request in group:
                unsent = Exchange(None, b"", reason, now, now, sent=False, error_kind=ErrorKind.CUT)
                row = response_row(self.ctx, request, unsent, self._text(request))
                self.writer.append({**row, "role": role or row["role"]})
