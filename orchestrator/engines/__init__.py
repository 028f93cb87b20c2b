"""Engine profiles: everything the orchestrator knows about one serving engine (profile.py says what),
one module per engine: its surface (endpoints, port and host flags, whether requests name the model, the
dialect of its answers, dialect.py, and its capabilities), its flags and the neutral settings they are.
The rest of the code asks `profile_for(arm.engine)` and names no engine (tests/contract/test_engine_profiles.py).

Adding an engine is one module here with a `PROFILE`, one line in `ENGINES` below, and its arm templates
in conf/arm/ (`engine: NAME`). May import: nothing of the orchestrator. The standard library only;
never Docker, subprocess, Hydra or the config.
"""

from __future__ import annotations

from orchestrator.engines import openai, reference, transformers_hooked, transformers_serve, vllm
from orchestrator.engines.dialect import Dialect, ParsedCompletion
from orchestrator.engines.profile import SETTINGS, Capabilities, Endpoints, EngineProfile

ENGINES: dict[str, EngineProfile] = {profile.name: profile for profile in (
    vllm.PROFILE, reference.PROFILE, transformers_serve.PROFILE, transformers_hooked.PROFILE, openai.PROFILE)}
DEFAULT_ENGINE = "vllm"  # an arm that names none, and a record from before `engine:` existed
STAND_IN_ENGINE = "reference"  # what answers under `stand_in=IMAGE` (config/arms.py `resolve_arms`)
OWN_SERVER_ENGINE = openai.PROFILE.name  # the profile a server of the user's own declares (nothing assumed)


def profile_for(name: str | None) -> EngineProfile:
    """The profile an arm's `engine:` names (validated before anything starts; see config/validate.py)."""
    return ENGINES[name or DEFAULT_ENGINE]


__all__ = ["DEFAULT_ENGINE", "ENGINES", "OWN_SERVER_ENGINE", "SETTINGS", "STAND_IN_ENGINE", "Capabilities",
           "Dialect", "Endpoints", "EngineProfile", "ParsedCompletion", "profile_for"]
