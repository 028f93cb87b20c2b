"""Protocol phases: what is sent, in which order and grouping.

sequential: each request waits for the previous answer. concurrent: `repeats` identical requests are
released together (run/release.py: their connections opened and warmed first, their bytes sent in one
loop); the spread of their send times, taken as the bytes reach the kernel, is recorded.
The very first request an arm receives is tagged cold (it may pay for compilation or autotuning).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.config.schema import Endpoint, PhaseKind, ProtocolConfig
from orchestrator.run import release
from orchestrator.run.client import CompletionClient, Exchange, json_bytes


@dataclass(frozen=True)
class Request:
    prompt_id: str
    phase: str
    phase_kind: PhaseKind
    batch_id: int
    repeat: int
    request_index: int
    cold: bool
    body: dict[str, Any]
    path: str = "/v1/completions"

    def request_id(self, arm: str) -> str:
        """Stable across a resume: which request of the protocol this is, not when it was sent."""
        return f"{arm}/{self.prompt_id}/{self.phase}/{self.batch_id}/{self.repeat}"

    def group_id(self, arm: str) -> str:
        """What is sent together: a concurrent batch, or one sequential request."""
        if self.phase_kind is PhaseKind.concurrent:
            return f"{arm}/{self.prompt_id}/{self.phase}/{self.batch_id}"
        return self.request_id(arm)

    @property
    def role(self) -> str:
        return "cold" if self.cold else "measured"



PATHS = {Endpoint.completions: "/v1/completions", Endpoint.chat: "/v1/chat/completions"}


def request_body(protocol: ProtocolConfig, model: str, prompt: str, endpoint: Endpoint | None = None,
                 arm_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """`endpoint`: the arm's, when it names one; `arm_extra`: merged last (engine-specific fields)."""
    params = protocol.request
    body: dict[str, Any] = {"model": model, "max_tokens": params.max_tokens, "temperature": params.temperature}
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


def plan(protocol: ProtocolConfig, model: str, prompts: dict[str, str], endpoint: Endpoint | None = None,
         arm_extra: dict[str, Any] | None = None) -> Iterator[list[Request]]:
    """Groups of requests in sending order: a group of one is sent alone, a larger group together."""
    index = 0
    for phase_name, phase in protocol.phases.items():
        for prompt_id, text in prompts.items():
            body = request_body(protocol, model, text, endpoint, arm_extra)
            path = PATHS[endpoint or protocol.endpoint]
            if phase.kind is PhaseKind.sequential:
                for repeat in range(phase.repeats):
                    yield [Request(prompt_id, phase_name, phase.kind, 0, repeat, index, index == 0, body, path)]
                    index += 1
            else:
                for batch in range(phase.batches):
                    group = [Request(prompt_id, phase_name, phase.kind, batch, r, index + r, index + r == 0, body,
                                     path) for r in range(phase.repeats)]
                    index += len(group)
                    yield group


def resent(groups: list[list[Request]], wanted: set[str], arm: str, attempt: int) -> list[list[Request]]:
    """The groups `run --resume` sends again, none of them cold, after a new cold request: the restarted
    engine's first answer is set apart as the first run's was (request_id .../restart-ATTEMPT)."""
    chosen = [[dataclasses.replace(r, cold=False) for r in g] for g in groups if g[0].group_id(arm) in wanted]
    if not chosen:
        return []
    first = chosen[0][0]
    cold = dataclasses.replace(first, phase_kind=PhaseKind.sequential, batch_id=0, repeat=-attempt, cold=True)
    return [[cold], *chosen]


@dataclass(frozen=True)
class GroupResult:
    exchanges: list[Exchange]
    send_spread_ns: int | None  # concurrent: last request handed to the kernel - first one
    running_max: int | None  # concurrent: most running requests the server's /metrics showed meanwhile


RUNNING_METRIC = "vllm:num_requests_running"


def running_requests(metrics_text: str) -> int | None:
    """Sum of vllm:num_requests_running over its label sets, from Prometheus text; None if absent."""
    values = [float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
              if line.startswith(RUNNING_METRIC) and line[len(RUNNING_METRIC):][:1] in ("{", " ")]
    return int(sum(values)) if values else None


async def send_group(client: CompletionClient, group: list[Request], metrics_path: str | None = "/metrics",
                     warm_path: str = "/health", poll_s: float = 0.005) -> GroupResult:
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
    if client.direct:
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
