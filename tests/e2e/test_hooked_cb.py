"""The hooked engine under --continuous-batching (Transformers' continuous batching: paged KV cache, packed
[1, T] forwards), as a real process in the transformers venv on tiny-llama (fp32, CPU), beside the static batch
path: a request alone gives the static path's tokens, logprobs and digests bit for bit; concurrent requests share
packed forwards, each digested over its own span with its own steps (0 its prefill, k its k-th decode); streamed
and seeded answers are the unstreamed ones. CI time: two engine starts (about 20 s here)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import CACHE, ROOT, require_engine_build

VENV_PYTHON = CACHE / "transformers-serve-5.25.0" / "venv" / "bin" / "python"
MODEL = CACHE / "models" / "tiny-llama"
BODY = {"prompt": "hello world the model is", "max_tokens": 5, "temperature": 0, "logprobs": 3,
        "return_token_ids": True, "digest": True}

pytestmark = pytest.mark.transformers


def _engine(*flags: str) -> Iterator[httpx.Client]:
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}/arms/transformers-hooked:{ROOT}/arms/reference-engine"}
    proc = subprocess.Popen([str(VENV_PYTHON), "-m", "hookedengine", "--model", str(MODEL), "--port", str(port),
                             "--device", "cpu", *flags], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the engine was not ready in 60 s"
            time.sleep(0.2)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def cb() -> Iterator[httpx.Client]:
    yield from _engine("--continuous-batching", "--max-model-len", "64")  # a forward holds at most 64 tokens


@pytest.fixture(scope="module")
def static() -> Iterator[httpx.Client]:
    yield from _engine()


def _complete(client: httpx.Client, **over: Any) -> dict[str, Any]:
    r = client.post("/v1/completions", json={**BODY, **over})
    assert r.status_code == 200, r.text
    return dict(r.json())


def _digests(client: httpx.Client, rid: str) -> dict[str, Any]:
    r = client.get(f"/v1/digests/{rid}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_alone_it_is_the_static_path_bit_for_bit(cb: httpx.Client, static: httpx.Client) -> None:
    a, s = _complete(cb), _complete(static)
    assert a["choices"][0]["token_ids"] == s["choices"][0]["token_ids"]
    assert a["choices"][0]["logprobs"] == s["choices"][0]["logprobs"]
    da, ds = _digests(cb, a["id"]), _digests(static, s["id"])
    assert [x["step"] for x in da["steps"]] == list(range(5))

    def same(calls: list[list[Any]]) -> list[list[Any]]:  # token ids are int32 under CB, int64 otherwise
        return [[*c[:9], None if c[3] == "Embedding" else c[9], *c[10:]] for c in calls]

    assert same(da["calls"]) == same(ds["calls"])  # every module call: shapes, rows, hashes, sums, first values


def test_concurrent_requests_share_packed_forwards_each_digested_over_its_own_span(cb: httpx.Client) -> None:
    prompts = ["hello world the model is", "a b", "the question is what the answer", "yes"]
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        answers = list(ex.map(lambda p: _complete(cb, prompt=p, max_tokens=6), prompts))
    shared = 0
    for ans in answers:
        d = _digests(cb, ans["id"])
        n = len(ans["choices"][0]["token_ids"])
        assert [x["step"] for x in d["steps"]] == list(range(n))  # its own steps, whatever shared its forwards
        assert {c[0] for c in d["calls"]} == set(range(n))
        prompt_len = d["steps"][0]["context_tokens"]
        for c in d["calls"]:
            step, module, start, stop, total, out_shape = c[0], c[2], c[4], c[5], c[6], c[8]
            if module == "model.embed_tokens":  # [1, T, H]: the request's span of the packed row
                assert out_shape[:2] == [1, total] and stop - start == (prompt_len if step == 0 else 1)
                shared += total > stop - start
    assert shared, "no forward packed two requests"
    ids = {a["id"] for a in answers}
    assert any(len(ids & set(s["batch_request_ids"])) > 1 for a in answers for s in _digests(cb, a["id"])["steps"])


def test_streamed_and_seeded_answers_are_the_unstreamed_ones(cb: httpx.Client) -> None:
    plain = _complete(cb, digest=False)
    with cb.stream("POST", "/v1/completions", json={**BODY, "digest": False, "stream": True}) as r:
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert [t for e in events for t in e["choices"][0]["token_ids"]] == plain["choices"][0]["token_ids"]
    assert events[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    seeded = [_complete(cb, temperature=1.0, seed=7, digest=False)["choices"][0]["token_ids"] for _ in range(2)]
    assert seeded[0] == seeded[1]
    assert seeded[0] != plain["choices"][0]["token_ids"], seeded  # sampled at T = 1, not greedy
    assert cb.get(f"/v1/digests/{plain['id']}").status_code == 404  # not flagged: no digests


def test_a_prompt_is_never_split_over_forwards(cb: httpx.Client) -> None:
    """Four 30-token prompts at once, 64 tokens a forward: Transformers' scheduler would split the third over two
    forwards (chunked prefill); here it waits for the next forward, and each prefill is one step of its own."""
    prompts = [" ".join(f"w{i}{j}" for j in range(14)) for i in range(4)]
    lens = [int(cb.post("/tokenize", json={"prompt": p}).json()["count"]) for p in prompts]
    assert sum(lens) > 64 and max(lens) + 4 <= 64, lens
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        answers = list(ex.map(lambda p: _complete(cb, prompt=p, max_tokens=4), prompts))
    for ans, n in zip(answers, lens, strict=True):
        d = _digests(cb, ans["id"])
        assert [x["step"] for x in d["steps"]] == list(range(4))
        embed = [c for c in d["calls"] if c[0] == 0 and c[2] == "model.embed_tokens"]
        assert len(embed) == 1 and embed[0][5] - embed[0][4] == n  # the whole prompt in one forward


@pytest.mark.parametrize("path", ["static", "cb"])
def test_max_tokens_0_is_answered_streamed_and_not(path: str, request: pytest.FixtureRequest) -> None:
    client: httpx.Client = request.getfixturevalue(path)
    body = {**BODY, "max_tokens": 0}
    answer = client.post("/v1/completions", json=body).json()
    assert answer["choices"][0]["text"] == "" and answer["usage"]["completion_tokens"] == 0
    streamed = client.post("/v1/completions", json={**body, "stream": True}).text
    events = [line.removeprefix("data: ") for line in streamed.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and "error" not in streamed, streamed
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
