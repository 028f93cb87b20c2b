"""Prompts sent as token ids: tokenized by the arm's server, and its usage.prompt_tokens checked against
the ids sent, a mismatch recorded as that request's error."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from orchestrator import config
from orchestrator.errors import EngineFailure
from orchestrator.run.send import protocol
from orchestrator.run.send.sender import RunContext, response_row
from orchestrator.run.wire.client import CompletionClient, Exchange


def client(handler: httpx.MockTransport) -> CompletionClient:
    return CompletionClient("http://engine", 5.0, transport=handler)


def test_token_ids_come_from_the_servers_tokenize() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"count": 3, "max_model_len": 64, "tokens": [7, 8, 9], "token_strs": None})

    ids = asyncio.run(protocol.token_ids(client(httpx.MockTransport(handler)), "m", {"p": "abc"}))
    assert ids == {"p": [7, 8, 9]} and seen == [{"model": "m", "prompt": "abc"}]


def test_an_engine_without_tokenize_fails_its_arm_with_the_fix() -> None:
    missing = httpx.MockTransport(lambda request: httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(EngineFailure, match=r"HTTP 404.*prompt_as=text"):
        asyncio.run(protocol.token_ids(client(missing), "m", {"p": "abc"}))


def test_ids_are_the_prompt_of_every_request_and_a_miscount_is_an_error() -> None:
    cfg = config.to_typed(config.compose([]))
    groups = list(protocol.plan(cfg.protocol, "m", {"p": [5, 6, 7, 8]}))
    request = groups[0][0]
    assert all(r.body["prompt"] == [5, 6, 7, 8] for g in groups for r in g)
    ctx = RunContext("s", "r", "a", 12)

    def answered(prompt_tokens: int) -> dict[str, object]:
        body = json.dumps({"choices": [{"text": "x", "finish_reason": "length"}],
                           "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}}).encode()
        return response_row(ctx, request, Exchange(200, body, None, 1, 2), "text")

    assert answered(4)["error"] is None and answered(4)["error_kind"] is None
    assert answered(5)["error_kind"] == "answer"  # a miscount: an error of the answer, not of the transport
    assert answered(3)["error"] == "the server counted 3 prompt tokens where 4 token ids were sent"
    assert protocol.prompt_token_check({"prompt": "text"}, 99) is None  # text: the server's count is its own
