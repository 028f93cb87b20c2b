"""`study.starts`: what a later start of an arm sends once it is ready: one request per prompt, the body of its
protocol's requests, alone and in order, role `measured` with `start` = the start's number (its request_id
ARM/PROMPT/start/S, run/send/sender.py). Recorded like the protocol's rows and kept out of every cell
(analysis/compare.py leaves start > 0 out); analysis/starts.py reads them: the spread of first answers over starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.config.schema import Endpoint, PhaseKind, ProtocolConfig
from orchestrator.engines import EngineProfile
from orchestrator.run.send import protocol


def requests(proto: ProtocolConfig, model: str | None, prompts: Mapping[str, str | list[int]],
             endpoint: Endpoint | None, arm_extra: dict[str, Any],
             engine: EngineProfile) -> list[list[protocol.Request]]:
    """A group of one per prompt, named after the protocol's first phase (the request its cells send)."""
    path = protocol.request_path(engine, endpoint or proto.endpoint)
    phase = next(iter(proto.phases), "start")
    return [[protocol.Request(prompt_id, phase, PhaseKind.sequential, 0, 0, index,
                              protocol.request_body(proto, model, text, endpoint, arm_extra), path)]
            for index, (prompt_id, text) in enumerate(prompts.items())]
