"""The runtime spec, the HTTP client and the protocol plan, with fakes (logic only; the real paths run
in tests/e2e)."""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx
import pytest

from orchestrator import config
from orchestrator.config.arms import container_spec
from orchestrator.engines import profile_for
from orchestrator.errors import ArmStartError
from orchestrator.run.send import protocol
from orchestrator.run.wire.client import FIRST_POLL_S, POLL_GROWTH, CompletionClient, wait_ready


def test_engine_argv_maps_bools_and_nulls() -> None:
    assert profile_for("vllm").argv({"seed": 0, "enforce-eager": True, "enable-prefix-caching": False,
                                     "quantization": None, "--max-num-seqs": 16}) == [
        "--seed", "0", "--enforce-eager", "--no-enable-prefix-caching", "--max-num-seqs", "16"]


def test_docker_run_is_loopback_and_redacts_secrets() -> None:
    arm = config.to_typed(config.compose(["arms.baseline.secret_env=[HF_TOKEN]", "arms.baseline.gpus=all",
                                          "+arms.baseline.env.A=b"])).arms["baseline"]
    spec = container_spec("baseline", arm, "sha256:abc", {"org.orchestrator.run": "r1"},
                                 {"HF_TOKEN": "hf_secret_value"})
    command = spec.docker_run()
    assert "-p 127.0.0.1::8000" in command and "--init" in command and "--gpus all" in command
    assert "-e HF_TOKEN " in command and "hf_secret_value" not in command
    assert spec.redacted_env() == {"A": "b", "HF_TOKEN": "<redacted>"}
    assert command.endswith("sha256:abc --served-model-name reference --seed 0 --max-num-seqs 16 --max-model-len 8192")


def _client(handler) -> CompletionClient:  # type: ignore[no-untyped-def]
    return CompletionClient("http://server", timeout_s=5, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(("handler", "status", "error"), [
    (lambda request: httpx.Response(500, content=b"boom"), 500, "HTTP 500"),
    (lambda request: httpx.Response(200, content=b"\x00garbage"), 200, None),
])
def test_client_records_every_answer(handler, status, error) -> None:  # type: ignore[no-untyped-def]
    exchange = asyncio.run(_client(handler).complete({"prompt": "x"}))
    assert (exchange.status, exchange.error) == (status, error)
    assert exchange.recv_ns >= exchange.send_ns


def test_client_records_no_answer() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    exchange = asyncio.run(_client(refuse).complete({"prompt": "x"}))
    assert exchange.status is None and exchange.error == "ConnectError: connection refused"
    assert exchange.error_kind == "connect"


def test_wait_ready_needs_a_real_200_and_fails_fast_on_exit() -> None:
    answers = iter([httpx.ReadError("reset"), httpx.Response(503), httpx.Response(200)])

    def health(request: httpx.Request) -> httpx.Response:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sleeps: list[float] = []
    wait_ready("http://s", "/health", 60, exit_code=lambda: None, log_tail=list,
               transport=httpx.MockTransport(health), sleep=sleeps.append)
    assert len(sleeps) == 2  # two failed probes, then the 200

    with pytest.raises(ArmStartError, match="exited with status 3") as err:
        wait_ready("http://s", "/health", 60, exit_code=lambda: 3, log_tail=lambda: ["Traceback: no GPU"],
                   transport=httpx.MockTransport(health), sleep=sleeps.append)
    assert "no GPU" in str(err.value)


def test_wait_ready_polls_every_20_ms_then_less_often_as_it_waits(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])  # the loop's clock and tenacity's

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    sleeps: list[float] = []
    with pytest.raises(ArmStartError, match="not ready after 30 s"):
        wait_ready("http://s", "/health", 30, exit_code=lambda: None, log_tail=list,
                   transport=httpx.MockTransport(lambda request: httpx.Response(503)), sleep=sleep)
    assert sleeps[:2] == [FIRST_POLL_S, FIRST_POLL_S + POLL_GROWTH * FIRST_POLL_S]
    assert sleeps[-1] == 0.25  # poll_s, once 23 s were waited
    waited = itertools.accumulate(sleeps)
    assert all(pause == pytest.approx(min(0.25, FIRST_POLL_S + POLL_GROWTH * before))
               for pause, before in zip(sleeps[1:], waited, strict=False))
    assert 100 < sum(1 for total in itertools.accumulate(sleeps) if total <= 4) < 120  # probes in the first 4 s


def test_plan_sends_cold_and_warmup_apart_and_gates_concurrent_groups() -> None:
    cfg = config.to_typed(config.compose(["protocol.warmup_requests=3"]))
    groups = list(protocol.plan(cfg.protocol, "reference", {"a": "x", "b": "y"}))
    sizes = [len(g) for g in groups]
    # cold, 3 warm-up, 6 sequential x 2 prompts, then 2 batches of 4 x 2 prompts: every batch whole
    assert sizes == [1] * (1 + 3 + 12) + [4] * 4
    requests = [r for g in groups for r in g]
    assert len(requests) == protocol.requests_per_arm(cfg.protocol, 2)
    assert [r.request_index for r in requests] == list(range(len(requests)))
    assert [r.role for r in requests[:4]] == ["cold", "warmup", "warmup", "warmup"]
    assert [r.prompt_id for r in requests[1:4]] == ["a", "b", "a"]  # warm-up: round-robin over the prompts
    assert {r.role for r in requests[4:]} == {"measured"}
    assert len({r.request_id("arm") for r in requests}) == len(requests)
    assert requests[0].body == {"model": "reference", "prompt": "x", "max_tokens": 16, "temperature": 0.0,
                                "logprobs": 20}


def test_concurrent_group_is_released_together_and_co_residency_is_measured() -> None:
    in_flight = {"now": 0, "max": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            text = f'vllm:num_requests_running{{model_name="m"}} {in_flight["now"]}.0\n'
            return httpx.Response(200, text=text)
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        await asyncio.sleep(0.05)
        in_flight["now"] -= 1
        return httpx.Response(200, json={})

    cfg = config.to_typed(config.compose([]))
    group = list(protocol.plan(cfg.protocol, "m", {"a": "x"}))[-1]
    result = asyncio.run(protocol.send_group(_client(handler), group))
    assert len(result.exchanges) == 4 and in_flight["max"] == 4
    assert result.running_max == 4
    assert result.send_spread_ns is not None and result.send_spread_ns < 50_000_000
    no_metrics = asyncio.run(protocol.send_group(_client(handler), group, metrics_path=None))
    assert no_metrics.running_max is None


def test_running_requests_parses_prometheus_text() -> None:
    text = ('vllm:num_requests_running{model_name="a",engine="0"} 3.0\n'
            'vllm:num_requests_running{model_name="a",engine="1"} 2.0\n'
            'vllm:num_requests_running_total 99\nvllm:num_requests_waiting 1.0\n')
    assert profile_for("vllm").running_requests(text) == 5
    assert profile_for("vllm").running_requests("# nothing here\n") is None
