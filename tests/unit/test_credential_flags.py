"""A name that says TOKEN but holds an on/off flag is no credential (docs/bundle.md, "No secret goes in"): Hugging
Face's HF_HUB_DISABLE_IMPLICIT_TOKEN=1 keeps a token from being sent, and an arm may set it; a token's value is
still refused."""

from __future__ import annotations

import pytest

from orchestrator.config.security import secrets_in_arm


@pytest.mark.parametrize("value", [1, 0, True, False, "1", "0", "true", "False", "yes", "no", "on", "off"])
def test_an_on_off_flag_under_a_credential_s_name_passes(value: object) -> None:
    assert secrets_in_arm("baseline", {"HF_HUB_DISABLE_IMPLICIT_TOKEN": value}, {}) == []  # before: refused


@pytest.mark.parametrize("value", ["hf_abc123", "sk-1", 123456, "2"])
def test_a_value_that_may_be_a_credential_is_still_refused(value: object) -> None:
    assert len(secrets_in_arm("baseline", {"HF_TOKEN": value}, {})) == 1
    assert len(secrets_in_arm("baseline", {}, {"api-key": value})) == 1
