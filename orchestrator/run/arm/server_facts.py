"""What a running arm's server says of itself, for its fingerprint: its version and models endpoints."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.engines import Endpoints
from orchestrator.run.wire.client import CompletionClient
from orchestrator.runtime.spec import Handle, Runtime


async def server_facts(runtime: Runtime, handle: Handle, paths: Endpoints) -> dict[str, Any]:
    """What the server says of itself where its profile has the endpoint (None where it has not)."""
    facts: dict[str, Any] = {}
    client = CompletionClient(handle.base_url, timeout_s=30, transport=runtime.http_transport)
    try:
        for key, path in (("version", paths.version), ("models", paths.models)):
            if path is None:
                facts[key] = None
                continue
            exchange = await client.request("GET", path)
            try:
                facts[key] = json.loads(exchange.body) if exchange.status == 200 else None
            except ValueError:
                facts[key] = None
    finally:
        await client.aclose()
    return facts
