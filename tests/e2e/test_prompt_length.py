"""`length_tokens: N` on an engine without a tokenize endpoint (real `transformers serve` 5.25.0 in Docker,
`make transformers-serve`): the arm's model's tokenizer files are read inside it with its own interpreter
(probes/tokenize_prompt.py), the text of exactly N tokens is sent (its /v1/completions takes no ids), and the
server's own usage.prompt_tokens says N; the same as a local process. CI time: two server starts (about 60 s here)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import CACHE, orchestrator, require_engine_build
from tests.e2e.test_transformers_serve import transformers_built  # noqa: F401  # the fixture

pytestmark = pytest.mark.transformers
VENV_PYTHON = CACHE / "transformers-serve-5.25.0" / "venv" / "bin" / "python"


@pytest.mark.docker
@pytest.mark.usefixtures("transformers_built", "docker_client", "no_leftover_containers")
def test_length_tokens_from_the_model_files_is_what_the_server_counts(tmp_path: Path) -> None:
    result = orchestrator("run", "study=transformers_repeatability", "study.noise_floor=false", "protocol=smoke",
                          "prompts=onset_length", "prompts.prompts.p.length_tokens=40", f"hydra.run.dir={tmp_path}",
                          timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(tmp_path / "data" / "responses", columns=["prompt_tokens", "error", "prompt_id"]).to_pylist()
    assert rows and all(r["prompt_tokens"] == 40 and r["error"] is None for r in rows)


def test_length_tokens_on_a_process_arm_reads_the_folder_its_models_path_maps_to(tmp_path: Path) -> None:
    """The same as a local process (runtime=process): the arm's `/models/tiny-llama` is mapped to the host folder
    for the tokenizer's read as for the server's argv (before the fix: "no tokenizer from /models/tiny-llama",
    the arm failed; found by the triage on the lent H100)."""
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    result = orchestrator("run", "study=transformers_repeatability", "runtime=process",
                          "arm@arms.cb=transformers_serve_process", "study.noise_floor=false", "protocol=smoke",
                          "prompts=onset_length", "prompts.prompts.p.length_tokens=40", f"hydra.run.dir={tmp_path}",
                          timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(tmp_path / "data" / "responses", columns=["prompt_tokens", "error"]).to_pylist()
    assert rows and all(r["prompt_tokens"] == 40 and r["error"] is None for r in rows)
