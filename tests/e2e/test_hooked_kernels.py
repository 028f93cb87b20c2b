"""The hooked engine's batch-invariant kernels (--invariant-kernels, hookedengine/invariant.py) on the CPU, as real
processes in the transformers venv on tiny-llama (fp32):
- through `orchestrator run study=locate_kernels` with batches of 16: `locate` says "identical digests" for the
  kernels' cells and names a split for the default kernels' (the same batches: the kernels are what changed);
- one engine, a request alone and then left-padded in a batch of prompts of other lengths: the same tokens,
  logprobs and digests at every module call.
CI time: three engine starts (about 60 s here)."""

from __future__ import annotations

import concurrent.futures as cf
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator, ran, require_engine_build
from tests.e2e.test_hooked_cb import VENV_PYTHON, _complete, _digests, _engine

pytestmark = pytest.mark.transformers


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    return ran(tmp_path_factory, "kernels", "study=locate_kernels", "protocol.phases.concurrent.repeats=16",
               "protocol.request.max_tokens=4")


def _first_line(run: Path, cell: str) -> str:
    result = orchestrator("locate", str(run), "--cell", cell, timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()[0]


def test_with_the_kernels_a_batch_of_16_gives_the_digests_of_a_request_alone(run: Path) -> None:
    for prompt in ("capital", "count"):
        assert _first_line(run, f"kernels/{prompt}/concurrent").startswith("identical digests:"), prompt
    default = [_first_line(run, f"default/{prompt}/concurrent") for prompt in ("capital", "count")]
    assert any(line.startswith("first split:") and "batch 16 vs 1" in line for line in default), default
    facts = {r["arm"]: json.loads(r["fingerprint_json"])["log_facts"]
             for r in pq.read_table(run / "data" / "arms", columns=["arm", "fingerprint_json"]).to_pylist()}
    assert facts["kernels"]["invariant_kernels"] == "on" and facts["kernels"]["attention_backend"] == "invariant"
    assert facts["default"]["invariant_kernels"] == "off"
    guard = json.loads((run / "guard.json").read_text())
    assert [p["verdict"] for p in guard["observed"]["pairs"]] == ["single-variable"], guard["observed"]


@pytest.fixture(scope="module")
def kernels() -> Iterator[httpx.Client]:
    yield from _engine("--invariant-kernels", "--batch-window-ms", "300")  # a loaded machine still batches them


def test_a_left_padded_request_in_a_batch_is_the_request_alone_bit_for_bit(kernels: httpx.Client) -> None:
    target = "hello world the model is"
    others = ["a b", "the question is what the answer was before the model said it", "yes", "one two three four five",
              "the capital of the country is the city where the model", "x", "count to ten: one two three"]
    alone = _complete(kernels, prompt=target)
    with cf.ThreadPoolExecutor(1 + len(others)) as ex:
        answers = list(ex.map(lambda p: _complete(kernels, prompt=p), [target, *others]))
    batched = answers[0]
    got = _digests(kernels, batched["id"])
    assert got["steps"][0]["batch_size"] > 1, got["steps"][0]  # it shared its prefill
    want = _digests(kernels, alone["id"])
    assert batched["choices"][0]["token_ids"] == alone["choices"][0]["token_ids"]
    assert batched["choices"][0]["logprobs"] == alone["choices"][0]["logprobs"]

    def own(calls: list[list[Any]]) -> list[list[Any]]:  # step, module, then the digests (not the batch's shapes)
        return [[c[0], c[2], *c[9:]] for c in calls]

    embed = next(c for c in got["calls"] if c[2] == "model.embed_tokens" and c[0] == 0)
    assert embed[8][1] > embed[5] - embed[4], embed  # its prefill was wider than its prompt: left-padded
    assert own(got["calls"]) == own(want["calls"])
