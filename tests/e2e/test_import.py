"""`orchestrator import` as CI runs it, from the user's side: detLLM itself (`detllm.api.check` through
scripts/detllm_openai.py) against a reference engine started here with the fused finalize on, and a folder of raw
answers saved one file each; each imported, then compared from another working directory (docs/import.md)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT

PROMPTS = ["The capital of France is", "Count from one to ten: one, two,"]


def orchestrator(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command from another working directory, as a user who installed it runs it."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "refengine", "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "reference", "--fused-finalize"], cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT / "arms" / "reference-engine"), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_detllm_check_imported_and_compared(engine: str, tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    made = subprocess.run([sys.executable, str(ROOT / "scripts" / "detllm_openai.py"), "--url", engine, "--out",
                           str(pack), "--runs", "4", "--tier", "2", "--max-new-tokens", "8", *PROMPTS],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    assert json.loads(made.stdout)["category"] == "SCORE_VARIANCE"  # detLLM's own verdict
    imported = orchestrator("import", str(pack), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert "Imported from detLLM 0.1.1: no top-k logprobs" in imported.stderr
    compared = orchestrator("compare", str(tmp_path / "run"), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr[-2000:]
    cells = json.loads(compared.stdout)["cells"]
    assert [(c["n"], c["distinct_signatures"] > 1) for c in cells] == [(4, True), (4, True)]


def test_a_folder_of_raw_answers_imported_and_compared(engine: str, tmp_path: Path) -> None:
    folder = tmp_path / "answers"
    folder.mkdir()
    for p, prompt in enumerate(PROMPTS):
        for r in range(3):
            body = {"model": "reference", "prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 5}
            (folder / f"p{p}_{r}.request.json").write_text(json.dumps(body))
            (folder / f"p{p}_{r}.json").write_bytes(httpx.post(f"{engine}/v1/completions", json=body,
                                                               timeout=60).content)
    imported = orchestrator("import", str(folder), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-2000:]
    compared = orchestrator("compare", str(tmp_path / "run"), "--json", cwd=tmp_path)
    cells = json.loads(compared.stdout)["cells"]
    assert sorted((c["n"], c["signature_basis"]) for c in cells) == [(3, "top_logprobs")] * 2
    assert all(c["distinct_signatures"] > 1 for c in cells)  # the fused finalize's top-5 logprobs vary
