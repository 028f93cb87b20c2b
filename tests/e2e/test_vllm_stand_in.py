"""Every vLLM preset runs end to end with the reference engine standing in for the vLLM image (it
accepts vLLM's flags): composition, plan, container, requests, parsing, record, report."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]
STAND_IN = "stand_in=orchestrator/reference-engine:0.1.0"
SMALL = ["protocol.request.max_tokens=4"]

PRESETS = {
    "vllm_fused_finalize": ["protocol.phases.sequential.repeats=3"],
    "vllm_position_parity": ["protocol.phases.sequential.repeats=2", "protocol.phases.concurrent.repeats=2",
                             "prompts.prompts.below.repeat_to_chars=300", "prompts.prompts.near.repeat_to_chars=400",
                             "prompts.prompts.above.repeat_to_chars=500"],
    "vllm_indexer_budget_onset": ["protocol.phases.sequential.repeats=2", "prompts=budget"],
    "vllm_batch_invariant": ["protocol.phases.sequential.repeats=2", "~protocol.phases.concurrent_32",
                             "~protocol.phases.concurrent_44", "~protocol.phases.concurrent_64"],
}


@pytest.mark.parametrize("study", sorted(PRESETS))
def test_vllm_preset_runs_on_the_stand_in(study: str, tmp_path: Path) -> None:
    result = orchestrator("run", f"study={study}", STAND_IN, f"hydra.run.dir={tmp_path}", *SMALL, *PRESETS[study])
    assert result.returncode == 0, result.stderr[-3000:]
    arms = pq.read_table(tmp_path / "data" / "arms").to_pylist()
    assert arms and all(a["status"] == "completed" for a in arms)
    assert all(a["image_ref"] == "orchestrator/reference-engine:0.1.0" for a in arms)
    assert all(json.loads(a["config_json"])["image"] != a["image_ref"] for a in arms)  # the arm's own image kept
    assert all(a["engine"] == "reference" != json.loads(a["config_json"])["engine"] for a in arms)  # who answered
    rows = pq.read_table(tmp_path / "data" / "responses").to_pylist()
    assert rows and all(r["error"] is None for r in rows), [r["error"] for r in rows if r["error"]][:3]
    assert all(json.loads(r["request_json"])["model"] == "model" for r in rows)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["cells"] and all(c["n"] > 0 for c in report["cells"])
    if study == "vllm_position_parity":
        assert all(c["max_prompt_spread"] is not None for c in report["cells"])
