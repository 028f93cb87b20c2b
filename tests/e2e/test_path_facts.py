"""Which path ran, against the real reference engine: its log says its attention backend, MoE backend, router
and top-k kernels and reduction path; the report lists them per arm (report.json `environment.arms[].path`),
and an A/B whose arms ran different paths where only another variable was declared gets the guard's line. The
patched arm differs in what the arm's config cannot show: its image's entrypoint (Docker, as CI runs it) or its
command (the process runtime) turns batch invariance off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import orchestrator

SMALL = ("protocol=probe", "protocol.phases.sequential.repeats=2")
STUDY = """# @package _global_
defaults:
  - /arm@arms.stock: {arm}
  - /arm@arms.patched: {arm}
  - override /protocol: probe
study:
  name: held_path
  baseline: stock
  variables:
    patched: {declared}
  held_facts: [reduction, attention_backend, router, router_topk, moe_backend]
arms:
  patched:
{patched}
"""
DOCKERFILE = """ARG BASE_IMAGE
FROM orchestrator/reference-engine:0.1.0
ENTRYPOINT ["python3", "-m", "refengine", "--no-batch-invariant"]
"""
PATH = {"attention_backend": "TORCH_SDPA", "moe_backend": "FLASHINFER_CUTLASS", "router": "softmax_topk",
        "router_topk": "torch.topk", "indexer_topk": "threshold_select", "topk_tiebreak": "stable",
        "fused_finalize": "off"}


def run_study(tmp_path: Path, arm: str, declared: str, patched: str, *overrides: str) -> tuple[str, dict[str, Any]]:
    conf = tmp_path / "conf" / "study"
    conf.mkdir(parents=True)
    (conf / "held_path.yaml").write_text(STUDY.format(arm=arm, declared=declared, patched=patched))
    result = orchestrator("run", f"hydra.run.dir={tmp_path / 'run'}", "--config-dir", str(tmp_path / "conf"),
                          "study=held_path", *SMALL, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]  # the observed check reports; the status stays 0
    return result.stderr, json.loads((tmp_path / "run" / "report.json").read_text())


def assert_the_path_is_said_and_held(stderr: str, report: dict[str, Any]) -> None:
    paths = {arm["arm"]: arm["path"] for arm in report["environment"]["arms"]}
    assert paths == {"stock": {**PATH, "reduction": "per_sequence", "batch_invariant": "on"},
                     "patched": {**PATH, "reduction": "stacked_split_k", "batch_invariant": "off"}}
    [observed] = report["guard"]["observed"]["pairs"]
    assert observed["verdict"] == "confounded" and observed["extra"] == ["log_facts.reduction"], observed
    assert observed["differing"]["log_facts.reduction"] == ["per_sequence", "stacked_split_k"]
    assert "guard: CONFOUNDED: patched vs stock observed: log_facts.reduction (per_sequence -> stacked_split_k)" \
        in stderr


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_another_image_that_takes_another_path_is_confounded_by_its_log(tmp_path: Path, docker_client: Any) -> None:
    context = tmp_path / "image"
    context.mkdir()
    (context / "Dockerfile").write_text(DOCKERFILE)
    patched = f"    image: orchestrator/path-fact-test:0.1.0\n    build: {{context: {context}}}"
    try:
        assert_the_path_is_said_and_held(*run_study(tmp_path, "reference", "[image, build]", patched))
    finally:
        docker_client.images.remove("orchestrator/path-fact-test:0.1.0", force=True)


def test_a_process_arm_whose_command_takes_another_path_is_confounded_by_its_log(tmp_path: Path) -> None:
    patched = "    command: [python3, -m, refengine, --no-batch-invariant]"
    assert_the_path_is_said_and_held(*run_study(tmp_path, "reference_process", "[command]", patched,
                                                "runtime=process"))
