"""Log facts belong to the engine profiles (docs/ARCHITECTURE.md, "Where to change what"): the same assertions
over every profile's patterns, and a new fact needs nothing outside its profile to be read and held."""

from __future__ import annotations

import dataclasses
import re

import pytest

from orchestrator.engines import ENGINES, EngineProfile

PROFILES = [pytest.param(profile, id=name) for name, profile in ENGINES.items()]


@pytest.mark.parametrize("profile", PROFILES)
def test_each_pattern_captures_the_fact_s_value_as_its_one_group(profile: EngineProfile) -> None:
    for name, pattern in profile.log_patterns.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), f"{profile.name}: '{name}' is no snake_case fact name"
        assert re.compile(pattern).groups == 1, f"{profile.name}.{name}: group 1 is the value, and only it"


def test_a_study_may_hold_every_profile_s_facts_and_no_other() -> None:
    from orchestrator.guard.held import LOG_FACTS

    assert {name for profile in ENGINES.values() for name in profile.log_patterns} == LOG_FACTS


def test_a_new_fact_is_read_from_the_log_by_its_profile_alone() -> None:
    from orchestrator.guard.fingerprint import log_facts

    profile = dataclasses.replace(ENGINES["vllm"], log_patterns={"kv_dtype": r"kv cache dtype: (\w+)"})
    lines = ["INFO 01-01 [core.py:1] kv cache dtype: fp8", "INFO other"]
    assert profile.log_facts(lines) == {"kv_dtype": "fp8"}
    assert "kv_dtype" not in log_facts(lines, "vllm")  # the shipped vLLM profile has no such fact
