"""Real `transformers serve` in the loop (5.25.0, `make transformers-serve`), the second engine written by
others: in Docker and as a local process, on a tiny random model made offline. The server returns no
logprobs and no token ids and has no /metrics, so the report must sign cells on their text and say so,
call co-residency "not observable", and still list the server's real flags and versions. A flag the server
does not have, a model dir that is missing (before anything starts) and a server that dies at start (its root
cause) are each one line with the conventions' exit status.
CI time: two server starts and two refusals (about 2 minutes here)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import CACHE, orchestrator, require_engine_build

VENV_PYTHON = CACHE / "transformers-serve-5.25.0" / "venv" / "bin" / "python"
PROCESS = ["runtime=process", "arm@arms.cb=transformers_serve_process"]
# One arm (no A/A), few requests: what is tested is what the orchestrator makes of this server's answers.
SMALL = ["study=transformers_repeatability", "study.noise_floor=false", "protocol.phases.sequential.repeats=4",
         "protocol.phases.concurrent_64.repeats=16", "protocol.request.max_tokens=16"]

pytestmark = pytest.mark.transformers


@pytest.fixture(scope="module")
def transformers_built() -> None:
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")


def _read_from_the_server(run: Path) -> None:
    report = json.loads((run / "report.json").read_text())
    cells = report["cells"]
    assert cells and all(c["signature_basis"] == "text" and c["distinct_signatures"] is not None for c in cells)
    assert all(c["errors"] == 0 for c in cells)
    text = (run / "report.md").read_text()
    assert "signature: completion text" in text or "(text)" in text
    assert "not observable" in text  # no /metrics, no trace: co-residency is never guessed
    assert "Knobs of cb checked against" in text and "transformers_serve 5.25.0" in text
    arms = pq.read_table(run / "data" / "arms").to_pylist()
    [arm] = arms
    fingerprint = json.loads(arm["fingerprint_json"])
    assert fingerprint["probe"]["packages"]["transformers"] == "5.25.0"  # from the arm's own interpreter
    responses = pq.read_table(run / "data" / "responses", columns=["request_json", "http_status"]).to_pylist()
    assert all(r["http_status"] == 200 for r in responses)
    assert all("model" not in json.loads(r["request_json"]) for r in responses)  # pinned server: no model field


@pytest.mark.docker
@pytest.mark.usefixtures("transformers_built", "docker_client", "no_leftover_containers")
def test_transformers_serve_in_docker_is_signed_on_text_with_its_real_flags(tmp_path: Path) -> None:
    result = orchestrator("run", *SMALL, f"hydra.run.dir={tmp_path}", timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    _read_from_the_server(tmp_path)


@pytest.mark.usefixtures("transformers_built")
def test_transformers_serve_as_a_process_and_its_refusals(tmp_path: Path) -> None:
    result = orchestrator("run", *SMALL, *PROCESS, f"hydra.run.dir={tmp_path / 'ok'}", timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    _read_from_the_server(tmp_path / "ok")

    # a flag the server does not have: refused before it starts, by the server's own listing
    result = orchestrator("run", *SMALL, *PROCESS, "+arms.cb.engine_args.max-num-seqs=8",
                          f"hydra.run.dir={tmp_path / 'flag'}", timeout_s=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "flag --max-num-seqs is not known to transformers_serve 5.25.0 (transformers)" in result.stderr

    # a model dir that is missing under the models mount: refused before anything starts, one line, exit 2
    result = orchestrator("run", *SMALL, *PROCESS, "arms.cb.engine_args.model=/models/no-such-model",
                          f"hydra.run.dir={tmp_path / 'model'}", timeout_s=300)
    assert result.returncode == 2, result.stderr[-3000:]
    [said] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "/models/no-such-model is " in said and "which does not exist" in said, said
    assert not (tmp_path / "model").exists()  # nothing written when nothing started

    # a server that dies at start (a dtype it refuses when it loads the model): its root cause in one line, exit 4
    result = orchestrator("run", *SMALL, *PROCESS, "arms.cb.engine_args.dtype=float8",
                          "arms.cb.startup_timeout_s=120", f"hydra.run.dir={tmp_path / 'dies'}", timeout_s=300)
    assert result.returncode == 4, result.stderr[-3000:]
    assert "root cause" in result.stderr and "Unsupported dtype: 'float8'" in result.stderr, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if line.startswith("[cb] FAILED") or line.startswith("    ")]
    assert 1 < len(said) <= 7 and "log lines in report.md" in said[-1]  # its last lines, not the 50-line tail
    assert "once what failed it is fixed" in (tmp_path / "dies" / "report.md").read_text()
