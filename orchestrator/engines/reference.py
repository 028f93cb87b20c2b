"""The project's reference engine (arms/reference-engine): it accepts vLLM's flags, prints vLLM's startup
lines and serves vLLM's metrics, plus its own knobs; it lists them itself (`--list-knobs`)."""

from __future__ import annotations

import dataclasses

from orchestrator.engines import vllm

PROFILE = dataclasses.replace(
    vllm.PROFILE,
    name="reference",
    description="the project's reference engine (arms/reference-engine), vLLM's flags and lines mimicked",
    knob_probe=None,  # its templates list knobs with the engine's own --list-knobs
    env_prefixes=("VLLM_", "REFENGINE_"),  # it reads vLLM's names for the mechanisms it models
    cache_args={**vllm.CACHE_ARGS, "autotune-cache-dir": "autotune"},
    request_extra={},  # as before this profile: its templates ask for nothing extra
    packages=("refengine",),
    modules=("refengine",),
    programs=(),
)
