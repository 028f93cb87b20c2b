"""Protocol phases: what is sent, in which order and grouping.

sequential: each request waits for the previous answer. concurrent: `repeats` identical requests are
created, held at one gate, and released together; the spread of their send times is recorded.
The very first request an arm receives is tagged cold (it may pay for compilation or autotuning).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.client import CompletionClient, Exchange
from orchestrator.schema import PhaseKind, ProtocolConfig


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



def request_body(protocol: ProtocolConfig, model: str, prompt: str) -> dict[str, Any]:
    params = protocol.request
    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": params.max_tokens,
                            "temperature": params.temperature}
    for key in ("logprobs", "prompt_logprobs", "seed"):
        if getattr(params, key) is not None:
            body[key] = getattr(params, key)
    if params.echo:
        body["echo"] = True
    body.update(params.extra)
    return body


def plan(protocol: ProtocolConfig, model: str, prompts: dict[str, str]) -> Iterator[list[Request]]:
    """Groups of requests in sending order: a group of one is sent alone, a larger group together."""
    index = 0
    for phase_name, phase in protocol.phases.items():
        for prompt_id, text in prompts.items():
            body = request_body(protocol, model, text)
            if phase.kind is PhaseKind.sequential:
                for repeat in range(phase.repeats):
                    yield [Request(prompt_id, phase_name, phase.kind, 0, repeat, index, index == 0, body)]
                    index += 1
            else:
                for batch in range(phase.batches):
                    group = [Request(prompt_id, phase_name, phase.kind, batch, r, index + r, index + r == 0, body)
                             for r in range(phase.repeats)]
                    index += len(group)
                    yield group


async def send_group(client: CompletionClient, group: list[Request]) -> list[Exchange]:
    if len(group) == 1:
        return [await client.complete(group[0].body)]
    gate = asyncio.Event()

    async def one(request: Request) -> Exchange:
        await gate.wait()
        return await client.complete(request.body)

    tasks = [asyncio.create_task(one(r)) for r in group]
    await asyncio.sleep(0)  # let every task reach the gate before it opens
    gate.set()
    return list(await asyncio.gather(*tasks))
