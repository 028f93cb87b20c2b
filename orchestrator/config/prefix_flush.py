"""`protocol.flush_prefix_cache` against each resolved arm's engine, before anything starts: an engine whose
profile names no route to empty its prefix cache gets its requests unflushed (a warning, `check` and `run`); an
engine that serves the route only under an env var the arm does not set (vLLM's dev mode) would refuse every
flush mid-run, so the study is refused (one line, exit 2)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.arms import ResolvedArm
from orchestrator.config.schema import Config, FlushPrefixCache


def _asked(config: Config) -> str | None:
    when = config.protocol.flush_prefix_cache
    return None if when is FlushPrefixCache.never else f"protocol.flush_prefix_cache is {when.value}"


def problems(config: Config, arms: Mapping[str, ResolvedArm]) -> list[str]:
    asked = _asked(config)
    found = []
    for name, resolved in arms.items() if asked else ():
        engine, env = resolved.profile, resolved.arm.env
        if engine.endpoints.reset_prefix_cache is None:
            continue
        for key, value in engine.reset_prefix_cache_env.items():
            if str(env.get(key)) != value:
                found.append(f"{asked}, but arm '{name}' (engine {engine.name}) serves "
                             f"{engine.endpoints.reset_prefix_cache} only with {key}={value}: set "
                             f"arms.{name}.env.{key}: \"{value}\", or protocol.flush_prefix_cache: never")
    return found


def warnings(config: Config, arms: Mapping[str, ResolvedArm]) -> list[str]:
    asked = _asked(config)
    return [f"{asked}, but arm '{name}' (engine {resolved.profile.name}) has no route to empty a prefix cache: its "
            "requests are sent unflushed" for name, resolved in (arms.items() if asked else ())
            if resolved.profile.endpoints.reset_prefix_cache is None]
