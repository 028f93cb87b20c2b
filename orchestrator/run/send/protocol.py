"""Protocol phases: what is sent, in which order and grouping.

sequential: each request waits for the previous answer. concurrent: `repeats` identical requests are
released together (run/wire/release.py: their connections opened and warmed first, their bytes sent in one
loop); the spread of their send times, taken as the bytes reach the kernel, is recorded.
Roles (docs/conventions.md): an arm's very first request is `cold` (it may pay for compilation or
autotuning), sent alone and kept apart from every cell; then `protocol.warmup_requests` requests marked
`warmup`, never part of a cell; then the phases, every request of them `measured`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.analysis.stats import repeats_for_bound
from orchestrator.config import series
from orchestrator.config.background import Background
from orchestrator.config.schema import Endpoint, PhaseConfig, PhaseKind, ProtocolConfig
from orchestrator.engines import EngineProfile, profile_for
from orchestrator.errors import ConfigError, EngineFailure
from orchestrator.run.load import schedule
from orchestrator.run.wire.client import CompletionClient, Exchange, json_bytes

if TYPE_CHECKING:
    import asyncio

COLD, WARMUP, MEASURED = "cold", "warmup", "measured"
DIGEST_FIELD = "digest"  # a request body's flag: the engine records its activation digests (run/send/digests.py)
BACKGROUND = "background"  # a load phase's traffic around its probes: never in a cell


@dataclass(frozen=True)
class Request:
    prompt_id: str
    phase: str
    phase_kind: PhaseKind
    batch_id: int
    repeat: int
    request_index: int
    body: dict[str, Any]
    path: str = "/v1/completions"
    role: str = MEASURED
    # A load phase's (run/load/generator.py): when it is meant to leave, from its window's start (None: a closed loop)
    offset_s: float | None = None
    window: schedule.LoadWindow | None = None

    def request_id(self, arm: str) -> str:
        """Stable across a resume: which request of the protocol this is, not when it was sent. A load phase's:
        ARM/PROMPT/PHASE/WINDOW/SEQ for a probe, ARM/background/PHASE/WINDOW/SEQ, ARM/warmup/PHASE/warmup/SEQ."""
        if self.phase_kind is PhaseKind.load:
            who = self.prompt_id if self.role == MEASURED else self.role
            return f"{arm}/{who}/{self.phase}/{WARMUP if self.role == WARMUP else self.batch_id}/{self.repeat}"
        where = self.batch_id if self.role == MEASURED else self.role
        return f"{arm}/{self.prompt_id}/{self.phase}/{where}/{self.repeat}"

    def group_id(self, arm: str) -> str:
        """What is sent together: a concurrent batch, a load phase's window, or one sequential request."""
        if self.phase_kind is PhaseKind.load:
            return f"{arm}/{self.phase}/{WARMUP if self.role == WARMUP else self.batch_id}"
        if self.phase_kind is PhaseKind.concurrent:
            return f"{arm}/{self.prompt_id}/{self.phase}/{self.batch_id}"
        return self.request_id(arm)

    @property
    def cold(self) -> bool:
        return self.role == COLD


def request_body(protocol: ProtocolConfig, model: str | None, prompt: str | list[int],
                 endpoint: Endpoint | None = None,
                 arm_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """`endpoint`: the arm's, when it names one; `arm_extra`: merged last (engine-specific fields)."""
    params = protocol.request
    body: dict[str, Any] = {} if model is None else {"model": model}
    body.update(max_tokens=params.max_tokens, temperature=params.temperature)
    if (endpoint or protocol.endpoint) is Endpoint.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
        if params.logprobs is not None:
            body.update(logprobs=True, top_logprobs=params.logprobs)
    else:
        body["prompt"] = prompt
        if params.logprobs is not None:
            body["logprobs"] = params.logprobs
    for key in ("prompt_logprobs", "seed"):
        if getattr(params, key) is not None:
            body[key] = getattr(params, key)
    if params.echo:
        body["echo"] = True
    body.update(params.extra)
    body.update(arm_extra or {})
    return body


def cell_phases(protocol: ProtocolConfig) -> dict[str, PhaseConfig]:
    """The phases as they run. With `target_bound`, every cell takes at least n = repeats_for_bound(bound)
    measured requests, overriding what the phase says: a sequential phase sends n repeats; a concurrent one
    keeps its batch size (`repeats`) and sends ceil(n / repeats) batches."""
    phases = series.expand(protocol.phases)  # a series to saturation: its points (config/series.py)
    if protocol.target_bound is None:
        return phases
    n = repeats_for_bound(protocol.target_bound)
    return {name: phase if phase.kind is PhaseKind.load  # a load point's probes are its rate's share
            else PhaseConfig(phase.kind, n, 1) if phase.kind is PhaseKind.sequential
            else PhaseConfig(phase.kind, phase.repeats, math.ceil(n / phase.repeats))
            for name, phase in phases.items()}


def cell_requests(phase: PhaseConfig, prompts: int = 1) -> int:
    """The measured requests of one cell (a prompt in this phase); a load phase's: its probes, those of a
    closed loop stopped by a duration counted for the requests it starts at once (it sends more)."""
    if phase.kind is PhaseKind.load:
        per_window = [sum(s.probe and s.prompt_id == "0" for s in schedule.slots(
            phase.load, [str(i) for i in range(prompts)], ["b"], window)) for window in range(phase.load.windows)]
        return sum(per_window)
    return phase.repeats * (phase.batches if phase.kind is PhaseKind.concurrent else 1)


def extended(name: str, phase: PhaseConfig) -> int:
    """How many further windows a load phase may send while not steady (run/send/extension.py): none for a
    series' points, whose backlog only grows once over-saturated (the series stops there)."""
    return 0 if series.parse(name) is not None else phase.load.warmup.extend_windows


def window_requests(phase: PhaseConfig, window: int) -> int:
    """Requests a load window is planned to send (a closed loop stopped by a duration: those it starts at once)."""
    return len(schedule.slots(phase.load, ["p"], ["b"], window, phase.load.concurrency))


def load_requests(phase: PhaseConfig) -> int:
    """A load phase's planned requests: its warm-up and every window."""
    windows = range(phase.load.windows)
    warmup = window_requests(phase, schedule.WARMUP_WINDOW) if schedule.has_warmup(phase.load) else 0
    return warmup + sum(window_requests(phase, w) for w in windows)


def plan(protocol: ProtocolConfig, model: str | None, prompts: Mapping[str, str | list[int]],
         endpoint: Endpoint | None = None, arm_extra: dict[str, Any] | None = None,
         engine: EngineProfile | None = None,
         background: Mapping[str, Background] | None = None) -> Iterator[list[Request]]:
    """Groups of requests in sending order: a group of one is sent alone, a larger group together, a load
    phase's window as one group (run/load/generator.py). A prompt is text, or the token ids its arm's server made of it
    (`prompt_as: token_ids`). The paths are those of the arm's engine profile (`engine`; None: the default
    engine's). `background`: load phase -> its background (absent: the study's prompts)."""
    engine = engine or profile_for(None)
    path = request_path(engine, endpoint or protocol.endpoint)
    bodies = {prompt_id: request_body(protocol, model, text, endpoint, arm_extra)
              for prompt_id, text in prompts.items()}
    if not bodies or not protocol.phases:
        return
    # The cells' requests ask for their digests (protocol.request.digests): not the cold, warm-up or background
    cells = {p: {**b, DIGEST_FIELD: True} for p, b in bodies.items()} if protocol.request.digests else bodies
    first_phase, order = next(iter(protocol.phases)), list(bodies)
    sequential = PhaseKind.sequential
    # Sent as the first phase sends its cells' requests (streamed, for a load phase that streams): an engine's
    # streamed text may differ from its unstreamed one (a held-back partial character), which is no cold effect.
    first = _stream_fields(protocol.phases[first_phase], engine)
    yield [Request(order[0], first_phase, sequential, 0, 0, 0, {**bodies[order[0]], **first}, path, COLD)]
    for repeat in range(protocol.warmup_requests):  # round-robin over the prompts
        prompt_id = order[repeat % len(order)]
        yield [Request(prompt_id, first_phase, sequential, 0, repeat, 1 + repeat, {**bodies[prompt_id], **first}, path,
                       WARMUP)]
    index = 1 + protocol.warmup_requests
    for phase_name, phase in cell_phases(protocol).items():
        if phase.kind is PhaseKind.load:
            own = (background or {}).get(series.base_name(phase_name))
            texts = dict(own.texts) if own else {p: t for p, t in prompts.items() if isinstance(t, str)}
            stream = _stream_fields(phase, engine)
            streamed = bool(stream)
            compose = functools.partial(_composed, protocol, model, endpoint, arm_extra, stream)
            windows = [schedule.LoadWindow(
                phase_name, w, phase.load,
                {p: {**b, **stream} for p, b in (bodies if w == schedule.WARMUP_WINDOW else cells).items()},
                compose, texts, path, 0, streamed, own.max_tokens if own else {})
                for w in ([schedule.WARMUP_WINDOW] if schedule.has_warmup(phase.load) else [])
                + list(range(phase.load.windows + extended(phase_name, phase)))]  # the further: extension.py
            for window in windows:
                window = dataclasses.replace(window, first_index=index)
                group = [load_request(window, s.seq, s.offset_s) for s in schedule.slots(
                    phase.load, list(bodies), list(texts), window.index, phase.load.concurrency, window.max_tokens)]
                index += len(group)
                yield group
            continue
        for prompt_id, body in cells.items():
            if phase.kind is sequential:
                for repeat in range(phase.repeats):
                    yield [Request(prompt_id, phase_name, phase.kind, 0, repeat, index, body, path)]
                    index += 1
            else:
                for batch in range(phase.batches):
                    yield [Request(prompt_id, phase_name, phase.kind, batch, r, index + r, body, path)
                           for r in range(phase.repeats)]
                    index += phase.repeats


def _composed(protocol: ProtocolConfig, model: str | None, endpoint: Endpoint | None, arm_extra: dict[str, Any] | None,
              stream: dict[str, Any], text: str) -> dict[str, Any]:
    """A background request's body for its text (max_tokens set per request)."""
    return {**request_body(protocol, model, text, endpoint, arm_extra), **stream}


def _stream_fields(phase: PhaseConfig, engine: EngineProfile) -> dict[str, Any]:
    """What a request of the phase adds to ask for a streamed answer: a load phase that streams, on an engine
    that can."""
    if phase.kind is PhaseKind.load and phase.load.stream and engine.capabilities.streaming:
        return {"stream": True, "stream_options": {"include_usage": True}}
    return {}


def load_request(window: schedule.LoadWindow, seq: int, offset_s: float | None) -> Request:
    """The seq-th request of a load window: a probe (the cell's body, role measured) or background."""
    at = window.slot(seq, offset_s)
    role = WARMUP if window.index == schedule.WARMUP_WINDOW else MEASURED if at.probe else BACKGROUND
    return Request(at.prompt_id, window.phase, PhaseKind.load, max(window.index, 0), seq, window.first_index + seq,
                   window.body(at), window.path, role, offset_s, window)


TIMEOUT_FLOOR_S = 300.0  # a cold request may compile or autotune for minutes (GPU vLLM)
TIMEOUT_PER_TOKEN_S = 0.05  # a request may wait for every token of every request of its batch (a slow CPU)


def request_timeout_s(protocol: ProtocolConfig) -> float:
    """The configured timeout, or one that grows with the largest batch and max_tokens, so a big batch on a
    slow engine is not cut off by a limit sized for one request."""
    if protocol.request_timeout_s is not None:
        return protocol.request_timeout_s
    phases = cell_phases(protocol).values()
    largest = max([p.repeats for p in phases if p.kind is PhaseKind.concurrent]
                  + [p.load.concurrency or window_requests(p, 0) for p in phases if p.kind is PhaseKind.load],
                  default=1)
    return TIMEOUT_FLOOR_S + TIMEOUT_PER_TOKEN_S * max(protocol.request.max_tokens, 1) * largest


def sample_size(protocol: ProtocolConfig, prompts: int = 1) -> dict[str, Any]:
    """What run.json keeps of the sample size: the rules, and each phase's measured requests per cell."""
    sets = series.settings(protocol.phases, load_requests)
    phases = cell_phases(protocol)
    return {"target_bound": protocol.target_bound, "stop_after_divergences": protocol.stop_after_divergences,
            "cell_requests": {name: cell_requests(phase, prompts) for name, phase in phases.items()},
            # the windows planned per load point: those past them were sent to extend its warm-up (extension.py)
            "load_windows": {name: p.load.windows for name, p in phases.items() if p.kind is PhaseKind.load},
            **({"series": sets} if sets else {})}


def requests_per_arm(protocol: ProtocolConfig, prompts: int) -> int:
    """How many requests `plan` sends an arm: the cold one, the warm-up, every phase's."""
    phases = cell_phases(protocol).values()
    per_prompt = sum(cell_requests(p) for p in phases if p.kind is not PhaseKind.load)
    load = sum(load_requests(p) for p in phases if p.kind is PhaseKind.load)
    return (1 + protocol.warmup_requests + per_prompt * prompts + load) if prompts and protocol.phases else 0


def resent(groups: list[list[Request]], wanted: set[str], arm: str, attempt: int) -> list[list[Request]]:
    """The groups `run --resume` sends again. The restarted engine's first answer is set apart as the first
    run's was: the protocol's own cold request when it is among them, else a new one (.../cold/-ATTEMPT)."""
    chosen = [g for g in groups if g[0].group_id(arm) in wanted]
    if not chosen or chosen[0][0].cold:
        return chosen
    cold = dataclasses.replace(groups[0][0], repeat=-attempt)
    return [[cold], *chosen]


@dataclass(frozen=True)
class GroupResult:
    exchanges: list[Exchange]
    send_spread_ns: int | None  # concurrent: last request handed to the kernel - first one
    running_max: int | None  # concurrent: most running requests the server's /metrics showed meanwhile


def server_view(rows: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """A batch as its server traced it (rows with `server_*` fields): the spread of the moments its requests
    were complete there, and the most of them that ran in one engine step; None where nothing was traced."""
    arrivals = [r["server_arrival_ns"] for r in rows if r.get("server_arrival_ns") is not None]
    steps = [(r["server_first_step"], r["server_last_step"]) for r in rows if r.get("server_first_step") is not None]
    spread = max(arrivals) - min(arrivals) if arrivals else None
    if not steps:
        return spread, None
    events = sorted([(first, 1) for first, _ in steps] + [(last + 1, -1) for _, last in steps])
    running = together = 0
    for _, change in events:  # ends sort before starts at the same step: intervals are inclusive
        running += change
        together = max(together, running)
    return spread, together


def request_path(engine: EngineProfile, endpoint: Endpoint) -> str:
    """The path the engine serves `endpoint` at; a ConfigError where it serves none."""
    path = engine.endpoints.chat if endpoint is Endpoint.chat else engine.endpoints.completions
    if path is None:
        other = Endpoint.completions if endpoint is Endpoint.chat else Endpoint.chat
        raise ConfigError(f"engine {engine.name} serves no {endpoint.value} endpoint; set the arm's "
                          f"endpoint={other.value}, or protocol.endpoint={other.value}")
    return path


async def token_ids(client: CompletionClient, model: str | None, prompts: Mapping[str, str],
                    engine: EngineProfile | None = None) -> dict[str, list[int]]:
    """Each prompt as the arm's server tokenizes it (the tokenize endpoint of its engine profile: POST
    {prompt} -> {tokens}; None: the default engine's)."""
    engine = engine or profile_for(None)
    path = engine.endpoints.tokenize
    if path is None:
        raise ConfigError(f"prompt_as token_ids: engine {engine.name} serves no tokenize endpoint; set "
                          "protocol.request.prompt_as=text")
    out = {}
    for prompt_id, text in prompts.items():
        body = {"prompt": text} if model is None else {"model": model, "prompt": text}
        exchange = await client.request("POST", path, body)
        try:
            tokens = json.loads(exchange.body)["tokens"] if exchange.status == 200 else None
        except (ValueError, KeyError, TypeError):
            tokens = None
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
            raise EngineFailure(f"prompt_as token_ids: the server's {path} gave no token ids for prompt "
                                f"{prompt_id} (HTTP {exchange.status}: {exchange.body[:200]!r}); set "
                                "protocol.request.prompt_as=text for an engine without /tokenize")
        out[prompt_id] = tokens
    return out


def prompt_token_check(body: dict[str, Any], prompt_tokens: int | None) -> str | None:
    """The server saw what was sent: with ids sent, usage.prompt_tokens must count exactly those."""
    sent = body.get("prompt")
    if not isinstance(sent, list) or prompt_tokens is None or prompt_tokens == len(sent):
        return None
    return f"the server counted {prompt_tokens} prompt tokens where {len(sent)} token ids were sent"


async def send_group(client: CompletionClient, group: list[Request], metrics_path: str | None = "/metrics",
                     warm_path: str = "/health", poll_s: float = 0.005,
                     running_requests: Callable[[str], int | None] | None = None) -> GroupResult:
    """`running_requests`: the arm's engine profile's reading of its metrics (default: the default engine's)."""
    import asyncio  # here: `run` imports this module for its checks, before anything starts

    running_requests = running_requests or profile_for(None).running_requests
    if len(group) == 1:
        return GroupResult([await client.complete(group[0].body, group[0].path)], None, None)
    tasks = await _release(client, group, warm_path)
    seen: list[int] = []
    if metrics_path:
        while not all(t.done() for t in tasks):
            exchange = await client.request("GET", metrics_path)
            running = running_requests(exchange.body.decode("utf-8", "replace")) if exchange.status == 200 else None
            if running is None:
                break  # no such metric here: say so (None) rather than guess
            seen.append(running)
            await asyncio.sleep(poll_s)
    exchanges = list(await asyncio.gather(*tasks))
    sends = [e.send_ns for e in exchanges if e.sent]
    return GroupResult(exchanges, max(sends) - min(sends) if sends else None, max(seen) if seen else None)


async def _release(client: CompletionClient, group: list[Request], warm_path: str) -> list[asyncio.Task[Exchange]]:
    """Every request of the group on its way; one task per request yields its Exchange."""
    import asyncio

    if client.direct:
        # h11 only here: `run` imports this module before anything starts (its checks), and the release
        # module while the first engine starts (run/prefetch.py), never during a batch
        from orchestrator.run.wire import release

        payloads = [(r.path, json_bytes(r.body)) for r in group]
        return await release.release(client.base_url, warm_path, payloads, client.timeout_s)
    gate = asyncio.Event()  # a transport stands in for the network (unit tests): httpx tasks behind one gate

    async def one(request: Request) -> Exchange:
        await gate.wait()
        return await client.complete(request.body, request.path)

    tasks = [asyncio.create_task(one(r)) for r in group]
    await asyncio.sleep(0)  # let every task reach the gate before it opens
    gate.set()
    return tasks
