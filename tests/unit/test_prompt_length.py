"""`length_tokens: N` where the engine serves no tokenize endpoint: the model's tokenizer files read inside
the arm (probes/tokenize_prompt.py, run through the runtime's exec), then the server's own count checked."""

from __future__ import annotations

import asyncio
import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from orchestrator.engines import profile_for
from orchestrator.errors import ConfigError, EngineFailure
from orchestrator.probes import tokenize_prompt
from orchestrator.run.send.prompt_length import ArmTokenizer, exact
from orchestrator.run.wire.client import CompletionClient
from orchestrator.runtime.fake import FakeRuntime, FakeServer
from orchestrator.runtime.spec import ContainerSpec, ExecResult


class ByteTokenizer:
    """A byte per token, a start token added as a server adds it; "é" decodes and re-encodes as two."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [1] * add_special_tokens + list(text.encode())}

    def num_special_tokens_to_add(self) -> int:
        return 1

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "ignore")


def test_the_probe_cuts_the_text_that_the_tokenizer_counts_as_exactly_n() -> None:
    got = tokenize_prompt.exact(ByteTokenizer(), "abcdefgh", 5)
    assert got == {"text": "abcd", "ids": [1, *b"abcd"]}
    assert tokenize_prompt.exact(ByteTokenizer(), "aéé", 4)["text"] == "aé"  # a cut mid-character is nudged
    with pytest.raises(ValueError, match="exactly 12"):
        tokenize_prompt.exact(ByteTokenizer(), "abc", 12)


def _arm(counted: int | None = None, refuse: bool = False) -> tuple[FakeRuntime, Any, list[list[str]],
                                                                   list[dict[str, Any]]]:
    """A running fake arm whose exec runs the probe's cut with ByteTokenizer; its server counts bytes + 1 (or,
    `refuse`, answers 400 as a server asked for more than its context)."""
    execs: list[list[str]] = []
    bodies: list[dict[str, Any]] = []

    def commands(argv: list[str], env: Mapping[str, str]) -> ExecResult:
        execs.append(argv)
        request = json.loads(zlib.decompress(base64.b64decode(argv[3])))
        answer = tokenize_prompt.answer(ByteTokenizer(), request["prompts"])
        return ExecResult(0, "a warning\n" + json.dumps(answer) + "\n")

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if refuse:
            return httpx.Response(400, json={"error": "Input length exceeds the model's maximum length"})
        tokens = len(body["prompt"].encode()) + 1 if counted is None else counted
        return httpx.Response(200, json={"choices": [{"text": "x", "finish_reason": "length", "index": 0}],
                                         "usage": {"prompt_tokens": tokens, "completion_tokens": 1}})

    runtime = FakeRuntime({"img": lambda spec: FakeServer(handler, commands=commands)})
    handle = runtime.start(ContainerSpec(name="a", image="img", command=[], env={}, secret_env={}, labels={},
                                         container_port=8000))
    return runtime, handle, execs, bodies


def _exact(runtime: FakeRuntime, handle: Any, python: str | None, model: str | None,
           n: int = 5) -> dict[str, str | list[int]]:
    files = ArmTokenizer(runtime, handle, python, model)  # type: ignore[arg-type]  # the fake runtime

    async def go() -> dict[str, str | list[int]]:
        client = CompletionClient(handle.base_url, 5, transport=runtime.http_transport)
        try:
            return await exact(client, None, {"p": "abcdefgh", "q": "kept"}, {"p": n},
                               profile_for("transformers_serve"), "a", files)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_without_a_tokenize_endpoint_the_arm_reads_its_model_files_and_the_server_counts_n() -> None:
    runtime, handle, execs, bodies = _arm()
    sent = _exact(runtime, handle, "/venv/bin/python", "/models/m")
    assert sent == {"p": "abcd", "q": "kept"}  # text: the engine takes no ids
    assert execs[0][:2] == ["/venv/bin/python", "-c"] and "AutoTokenizer" in execs[0][2]
    assert execs[0][4] == "/models/m"  # an argument of its own: a process runtime maps it as the arm's argv
    assert bodies == [{"prompt": "abcd", "max_tokens": 1}]  # the server's count, checked once before the protocol


def test_a_server_counting_otherwise_refuses_the_arm() -> None:
    runtime, handle, _, _ = _arm(counted=7)
    with pytest.raises(EngineFailure, match="server counted 7"):
        _exact(runtime, handle, "python3", "/models/m")


def test_a_server_refusing_the_prompt_says_so_and_not_that_the_tokenizers_differ() -> None:
    runtime, handle, _, _ = _arm(refuse=True)
    with pytest.raises(EngineFailure) as caught:
        _exact(runtime, handle, "python3", "/models/m")
    said = str(caught.value)
    assert "refused prompt 'p' of 5 tokens (HTTP 400: " in said and "maximum length" in said
    assert "--long-prompt-tokens" in said and "not the tokenizer" not in said and "\n" not in said


def test_an_unknown_interpreter_or_model_or_a_short_text_is_one_line() -> None:
    runtime, handle, _, _ = _arm()
    with pytest.raises(ConfigError, match="interpreter"):
        _exact(runtime, handle, None, "/models/m")
    with pytest.raises(ConfigError, match="its model"):
        _exact(runtime, handle, "python3", None)
    with pytest.raises(ConfigError, match="longer text"):
        _exact(runtime, handle, "python3", "/models/m", n=40)
