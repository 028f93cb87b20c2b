"""A completion body as the arm's engine answers it: the profile's dialect (engines/dialect.py) reads it.
Malformed bodies never raise: the row keeps the raw bytes and says what was wrong in `error`."""

from __future__ import annotations

from orchestrator.engines import EngineProfile, profile_for
from orchestrator.engines.dialect import ParsedCompletion


def parse_completion(body: bytes, engine: EngineProfile | None = None) -> ParsedCompletion:
    """`engine`: the arm's profile (None: the default engine's, as for a record from before `engine:`)."""
    return (engine or profile_for(None)).parse(body)
