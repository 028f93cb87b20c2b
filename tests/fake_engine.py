"""A vLLM-shaped engine for the fake runtime (orchestrator/runtime/fake.py): OpenAI completions with
logprobs, /health, /version, /v1/models, /metrics and vLLM's startup lines, all in-process.

Images: `fake-engine` answers every identical request identically; `fake-noisy` perturbs the logprobs of
every call (a mechanism switched on, for tests that must detect it); both trace each request as the
reference engine does, as if it ran in steps 0..n (so every concurrent batch is co-resident by the trace,
whatever /metrics says); `fake-crash` exits at once with
status 3; `fake-dying` dies at its fourth completion; `fake-refusing` answers every completion with HTTP
400; `fake-idle` starts and answers nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Mapping

import httpx

from orchestrator.runtime.fake import FakeRuntime, FakeServer
from orchestrator.runtime.spec import ContainerSpec, ExecResult, Inventory

VERSION = "0.0.fake"
KNOBS = {"flags": ["--served-model-name", "--seed", "--max-num-seqs", "--max-model-len", "--fused-finalize",
                   "--no-fused-finalize"], "env": ["VLLM_BATCH_INVARIANT", "REFENGINE_FUSED_FINALIZE"]}


def _tokens(prompt: str, n: int) -> list[str]:
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return [f" t{digest[i * 2:i * 2 + 2]}" for i in range(n)]


def engine(noisy: bool = False):  # type: ignore[no-untyped-def]
    def factory(spec: ContainerSpec) -> FakeServer:
        calls = itertools.count()
        server = FakeServer(handler=lambda request: _answer(request, noisy, next(calls)),
                            log=[f"INFO vLLM server version {VERSION}", "INFO Using max model len 512",
                                 "INFO Starting vLLM-compatible server on http://0.0.0.0:8000"],
                            commands=_commands)
        return server
    return factory


def _answer(request: httpx.Request, noisy: bool, call: int) -> httpx.Response:
    path = request.url.path
    if path == "/health":
        return httpx.Response(200)
    if path == "/version":
        return httpx.Response(200, json={"version": VERSION})
    if path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "model", "max_model_len": 512}]})
    if path == "/metrics":
        return httpx.Response(200, text='vllm:num_requests_running{engine="0"} 1.0\n')
    if path != "/v1/completions":
        return httpx.Response(404, json={"error": {"message": f"no route {path}"}})
    body = json.loads(request.content)
    tokens = _tokens(str(body["prompt"]), int(body.get("max_tokens", 4)))
    k = int(body.get("logprobs") or 0)
    jitter = 1e-9 * call if noisy else 0.0
    top = [{f"{tok}{j}": -0.1 * (j + 1) - jitter for j in range(k)} for tok in tokens] if k else None
    logprobs = {"tokens": tokens, "token_logprobs": [-0.1 - jitter] * len(tokens), "top_logprobs": top,
                "text_offset": list(range(len(tokens)))} if k else None
    choice = {"index": 0, "text": "".join(tokens), "finish_reason": "length", "logprobs": logprobs}
    trace = {"arrival_ns": time.time_ns(), "first_step": 0, "last_step": len(tokens)}
    return httpx.Response(200, json={"object": "text_completion", "model": "model", "choices": [choice],
                                     "usage": {"prompt_tokens": 3, "completion_tokens": len(tokens)},
                                     "engine_trace": trace})


def _commands(argv: list[str], env: Mapping[str, str]) -> ExecResult:
    if argv[-1:] == ["--list-knobs"]:
        return ExecResult(0, json.dumps(KNOBS) + "\n")
    if argv[:2] in (["python3", "-c"], ["python", "-c"]):  # the environment probe
        probe = {"python": "3.11.2", "os": "fake", "cpu": "fake", "cpu_count": 1, "cuda": None,
                 "packages": {"vllm": VERSION}, "gpu": {"name": None, "count": 0}, "env": dict(env), "errors": {}}
        return ExecResult(0, json.dumps(probe) + "\n")
    return ExecResult(127, f"{argv[0]}: not found\n")


def _dying(spec: ContainerSpec) -> FakeServer:
    """Answers three completions, then its engine core dies: HTTP 500, a traceback in the log, exit 1."""
    answered = itertools.count()
    server = FakeServer(handler=lambda request: httpx.Response(500), log=["INFO Starting vLLM-compatible server"],
                        commands=_commands)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/completions":
            return _answer(request, False, 0)
        if next(answered) < 3:
            return _answer(request, False, 0)
        server.log += ["INFO request 4 received", "ERROR EngineCore encountered a fatal error.",
                       "Traceback (most recent call last):", '  File "batch_invariant.py", line 1, in mean_dim',
                       "TypeError: 'function' object is not subscriptable", "INFO Shutting down"]
        server.exit_code = 1
        return httpx.Response(500, json={"error": {"message": "EngineCore encountered an issue."}})

    server.handler = handler
    return server


def _refusing(spec: ContainerSpec) -> FakeServer:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions":
            return httpx.Response(400, json={"error": {"message": "Requested sample logprobs of 25, which is greater "
                                                                  "than max allowed: 20"}})
        return _answer(request, False, 0)
    return FakeServer(handler=handler, log=["INFO Starting vLLM-compatible server"], commands=_commands)


def _crash(spec: ContainerSpec) -> FakeServer:
    return FakeServer(handler=lambda request: httpx.Response(500), log=["boom: no model"], exit_code=3)


def _idle(spec: ContainerSpec) -> FakeServer:
    return FakeServer(handler=lambda request: httpx.Response(404), log=["idle"])


def fake_runtime(inventory: Inventory | None = None) -> FakeRuntime:
    images = {"fake-engine": engine(), "fake-noisy": engine(noisy=True), "fake-crash": _crash, "fake-dying": _dying,
              "fake-refusing": _refusing, "fake-idle": _idle}
    return FakeRuntime(images, commands=_commands, inventory=inventory)
