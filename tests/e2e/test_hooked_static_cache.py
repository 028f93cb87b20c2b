"""The hooked engine's --static-cache (hookedengine/kv.py), as real processes in the transformers venv on
tiny-llama (fp32, CPU): a window's cache preallocated and its mask as long gives the tokens of the growing cache
(the logprobs within float32's last bits: the attention runs over a longer, masked row), with digests on, alone
and in a window of prompts of other lengths, and under torch.compile (alone). CUDA graphs need a GPU
(docs/gpu-validation.md has the H100 run). CI time: three engine starts, one of them compiling (about 60 s here)."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_hooked_cb import _complete, _engine

pytestmark = pytest.mark.transformers
PROMPTS = ["hello world the model is", "a b", "the question is what the answer is and why", "yes"]


@pytest.fixture(scope="module")
def dynamic() -> Iterator[httpx.Client]:
    yield from _engine()


@pytest.fixture(scope="module")
def static() -> Iterator[httpx.Client]:
    yield from _engine("--static-cache")


def _window(client: httpx.Client, **over: Any) -> list[dict[str, Any]]:
    """The prompts sent together (one window of the engine's batch), each answer's first choice."""
    with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
        return [a["choices"][0] for a in ex.map(lambda p: _complete(client, prompt=p, max_tokens=8, **over),
                                                PROMPTS)]


def _close(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(abs(x - y) < 1e-4 for x, y in zip(a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"],
                                                 strict=True))


def test_a_static_cache_gives_the_growing_caches_tokens_alone_and_in_a_window(dynamic: httpx.Client,
                                                                               static: httpx.Client) -> None:
    alone = [_complete(c)["choices"][0] for c in (dynamic, static)]
    assert alone[0]["token_ids"] == alone[1]["token_ids"] and _close(*alone)
    for d, s in zip(_window(dynamic), _window(static), strict=True):
        assert len(s["token_ids"]) == 8 and d["token_ids"] == s["token_ids"] and _close(d, s)


def test_a_static_cache_serves_digests(static: httpx.Client) -> None:
    rid = _complete(static)["id"]
    steps = static.get(f"/v1/digests/{rid}").json()["steps"]
    assert [s["step"] for s in steps] == list(range(5))


def test_compiled_over_a_static_cache_it_answers_the_same_tokens(static: httpx.Client) -> None:
    for compiled in _engine("--static-cache", "--compile", "--no-digests"):
        compiled.timeout = httpx.Timeout(300)  # Inductor compiles each new shape on first sight
        for prompt in PROMPTS[:2]:  # alone: a window's every size would be compiled again
            eager, comp = (_complete(c, prompt=prompt, digest=False)["choices"][0] for c in (static, compiled))
            assert eager["token_ids"] == comp["token_ids"]
