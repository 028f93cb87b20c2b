"""Golden plans: for every study preset, the exact `docker run` command of each arm is pinned.
Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, orchestrator

GOLDEN = ROOT / "tests" / "golden" / "plan"
STUDIES = sorted(p.stem for p in (ROOT / "conf" / "study").glob("*.yaml"))
# The HF cache mount is ${HOME}/.cache/huggingface, the vLLM CPU models' ${cache dir}/models.
ENV = {**{k: v for k, v in os.environ.items() if k not in ("ORCHESTRATOR_CACHE_DIR", "XDG_CACHE_HOME")},
       "HOME": "/root"}


# Demos of what the guard refuses: `plan` makes `run`'s checks, so it refuses them too.
REFUSED = {"guard_finalize_and_pin": "engine_args.moe-backend (<absent> -> flashinfer_cutlass) [NOT declared]"}


@pytest.mark.parametrize("study", STUDIES)
def test_plan_matches_golden(study: str) -> None:
    result = orchestrator("plan", f"study={study}", env=ENV)
    if study in REFUSED:
        assert result.returncode == 2 and REFUSED[study] in result.stderr, result.stderr
        return
    assert result.returncode == 0, result.stderr
    golden: Path = GOLDEN / f"{study}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(result.stdout)
    assert golden.is_file(), f"no golden plan for {study}: run with UPDATE_GOLDEN=1"
    assert result.stdout == golden.read_text()


def test_stand_in_plan_drops_gpus_and_mounts() -> None:
    result = orchestrator("plan", "study=vllm_fused_finalize", "stand_in=orchestrator/reference-engine:0.1.0",
                          env=ENV)
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("docker run")]
    assert len(commands) == 2
    for command in commands:
        assert "--gpus" not in command and "huggingface" not in command and "--shm-size" not in command
        assert " orchestrator/reference-engine:0.1.0 --model nvidia/Qwen3-30B-A3B-NVFP4 " in command
        assert "scratch/" in command  # the caches stay: they live in the run dir


def test_process_runtime_plan_is_a_command_line() -> None:
    result = orchestrator("plan", "runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
                          env=ENV)
    assert result.returncode == 0, result.stderr
    [command] = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert command.startswith("env PYTHONPATH=arms/reference-engine ") and "docker" not in command
    assert command.endswith("python3 -m refengine --served-model-name reference --seed 0 --max-num-seqs 16 "
                            "--max-model-len 8192 --host 127.0.0.1 --port '{port}'")
