"""`protocol.flush_prefix_cache`: the engine's prefix cache emptied through its profile's reset route (vLLM's
POST /reset_prefix_cache) before every group of requests, or before each phase's first (the cold request
and the warm-up count as phases of their own), so that no request is
served a prefix another one left. An arm whose engine has no such route is sent its requests without (`check`
warns: config/prefix_flush.py); a flush the engine refuses fails the arm, as a measurement that could not be made
as declared."""

from __future__ import annotations

from orchestrator.config.schema import FlushPrefixCache
from orchestrator.errors import EngineFailure
from orchestrator.run.send.protocol import Request
from orchestrator.run.wire.client import CompletionClient


class PrefixFlush:
    def __init__(self, when: FlushPrefixCache, path: str | None) -> None:
        self.when, self.path = when, path
        # the phase and role of the group sent before: the cold request and the warm-up are parts of their own
        self.last_part: tuple[str, str] | None = None

    async def before(self, client: CompletionClient, group: list[Request]) -> None:
        """Before `group` is sent: a flush where the setting asks for one here."""
        phase, previous = group[0].phase, self.last_part
        self.last_part = (phase, group[0].role)
        if self.path is None or self.when is FlushPrefixCache.never:
            return
        if self.when is FlushPrefixCache.between_phases and self.last_part == previous:
            return
        exchange = await client.request("POST", self.path)
        if exchange.status != 200:
            raise EngineFailure(f"the prefix cache could not be emptied before {phase}/{group[0].prompt_id} "
                                f"(protocol.flush_prefix_cache: {self.when.value}): POST {self.path} answered "
                                f"{exchange.error or exchange.status}")
