"""A credential typed into the triaged arm's env (docs/bundle.md, "No secret goes in"): triage refuses it as `run`
does, naming the user's own arm, before it writes any step's config (which would hold the value)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.verbs import triage as verb


@pytest.mark.parametrize("plan", [[], ["--plan"]])
def test_a_credential_in_the_arm_s_env_is_refused_before_anything_is_written(tmp_path: Path, plan: list[str]) -> None:
    out = tmp_path / "triage"
    with pytest.raises(ConfigError) as refused:
        verb.main(["runtime=process", "arm@arms.baseline=reference_process", "+arms.baseline.env.HF_TOKEN=hunter2-abc",
                   "--out", str(out), *plan])
    assert refused.value.problems == [line for line in refused.value.problems
                                      if "arms.baseline.env.HF_TOKEN looks like a credential" in line
                                      and "arms.baseline.secret_env=[HF_TOKEN]" in line] != []
    assert not out.exists()  # before: out/starts/config/arm/triage_step_as_given.yaml held the value
