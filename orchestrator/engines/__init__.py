"""Engine profiles: everything the orchestrator knows about one serving engine (profile.py says what),
one module per engine. The rest of the code asks `profile_for(arm.engine)`.

Adding an engine is one module here with a `PROFILE`, one line in `ENGINES` below, and its arm templates
in conf/arm/ (`engine: NAME`). May import: nothing of the orchestrator. The standard library only;
never Docker, subprocess, Hydra or the config.
"""

from __future__ import annotations

from orchestrator.engines import openai, reference, transformers_serve, vllm
from orchestrator.engines.profile import EngineProfile

ENGINES: dict[str, EngineProfile] = {profile.name: profile for profile in (
    vllm.PROFILE, reference.PROFILE, transformers_serve.PROFILE, openai.PROFILE)}
DEFAULT_ENGINE = "vllm"  # an arm that names none, and a record from before `engine:` existed


def profile_for(name: str | None) -> EngineProfile:
    """The profile an arm's `engine:` names (validated before anything starts; see config/validate.py)."""
    return ENGINES[name or DEFAULT_ENGINE]


__all__ = ["DEFAULT_ENGINE", "ENGINES", "EngineProfile", "profile_for"]
