"""A workload that is one (issue 47 item 3, docs/load.md): the synthetic default background, its prefix reuse,
`prefix_seen`, and the warning where a load point has fewer distinct prompts than requests in flight."""

from __future__ import annotations

import asyncio
import json
import statistics
from typing import Any

import httpx
import numpy as np
import pytest

from orchestrator import cli
from orchestrator.analysis import variety
from orchestrator.config import workload
from orchestrator.config.background import phase_backgrounds
from orchestrator.config.schema import SyntheticConfig
from orchestrator.config.synthetic import synthetic_prompts
from orchestrator.config.validate import load
from orchestrator.engines import profile_for
from orchestrator.run.send import load_window, protocol, sender
from orchestrator.run.wire.client import CompletionClient

AT = "protocol.phases.load.load"


def test_the_synthetic_set_has_the_lengths_it_is_set_to_and_is_the_same_every_run() -> None:
    settings = SyntheticConfig(input_words_mean=60, input_words_stddev=15, output_tokens_mean=40,
                               output_tokens_stddev=10)
    made = synthetic_prompts(settings, 2000, seed=3)
    words = [p.words for p in made.values()]
    tokens = [p.max_tokens for p in made.values()]
    assert len({p.text for p in made.values()}) == 2000  # distinct
    assert all(len(p.text.split(" ")) == p.words for p in made.values())
    assert statistics.mean(words) == pytest.approx(60, abs=1.5)
    assert statistics.stdev(words) == pytest.approx(15, abs=1.5)
    assert statistics.mean(tokens) == pytest.approx(40, abs=1) and statistics.stdev(tokens) == pytest.approx(10, abs=1)
    assert synthetic_prompts(settings, 2000, seed=3) == made
    assert synthetic_prompts(settings, 2000, seed=4) != made
    few = synthetic_prompts(SyntheticConfig(input_words_mean=1, input_words_stddev=0), 500, seed=0)
    assert len({p.text for p in few.values()}) == 500  # more prompts than one-word texts: distinct anyway


def test_the_default_background_is_synthetic_with_a_prompt_per_request_in_flight() -> None:
    config = load(["study=load_point", f"{AT}.background=synthetic", f"{AT}.rate_per_s=null", f"{AT}.concurrency=24"])
    assert len(phase_backgrounds(config)["load"].texts) == 100  # AIPerf's 100 entries, more than 24
    wide = load(["study=load_point", f"{AT}.background=synthetic", f"{AT}.concurrency=250"])
    assert len(phase_backgrounds(wide)["load"].texts) == 250  # the study's highest concurrency
    assert workload.warnings(wide) == []
    plain = load(["study=vllm_cpu_load"])  # a shipped load study that names no background: synthetic
    assert plain.protocol.phases["load_4"].load.background == "synthetic"
    assert "load_4" in phase_backgrounds(plain)


def test_two_prompts_at_a_concurrency_of_24_are_warned() -> None:
    config = load(["study=load_point", f"{AT}.background=study", f"{AT}.rate_per_s=null", f"{AT}.concurrency=24"])
    [warning] = workload.warnings(config)
    assert warning.startswith("load phase load: 2 distinct prompts for 24 requests in flight")
    assert workload.warnings(load(["study=load_point", f"{AT}.background=study", f"{AT}.concurrency=2"])) == []


def test_check_prints_the_warning_and_plan_the_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "study=load_point", f"{AT}.background=study", f"{AT}.concurrency=24"]) == 0
    assert "warning: load phase load: 2 distinct prompts for 24 requests in flight" in capsys.readouterr().err
    assert cli.main(["plan", "study=load_point", f"{AT}.background=synthetic",
                     f"{AT}.synthetic.prefix_share=0.25"]) == 0
    assert ("# load phase load: 102 distinct prompts (2 of the probes, 100 more of the synthetic background); input "
            "100 words (sd 25), max_tokens 32 (sd 8), 25% of the background reusing a prefix sent before in its window"
            ) in capsys.readouterr().out


def _window(share: float, requests: int = 400) -> list[protocol.Request]:
    config = load(["study=load_point", f"{AT}.background=synthetic", f"{AT}.synthetic.prefix_share={share}",
                   f"{AT}.requests={requests}", f"{AT}.rate_per_s=1000", f"{AT}.concurrency=8"])
    groups = list(protocol.plan(config.protocol, "m", {"capital": "C", "count": "N"},
                                background=phase_backgrounds(config)))
    return groups[2]  # the cold request, the warm-up, window 0


def test_a_share_of_the_background_reuses_a_prefix_and_the_schedule_is_the_same_every_run() -> None:
    window = _window(0.3)
    background = [r for r in window if r.role == protocol.BACKGROUND]
    reusing = [r for r in background if "+" in r.prompt_id]
    assert len(reusing) / len(background) == pytest.approx(0.3, abs=0.06)
    assert not [r for r in _window(0.0) if "+" in r.prompt_id]
    assert [(r.prompt_id, r.body) for r in _window(0.3)] == [(r.prompt_id, r.body) for r in window]
    texts = [r.body["prompt"] for r in background]
    for i, r in enumerate(background):  # each reused prefix is a prompt an earlier request started with
        if "+" in r.prompt_id:
            lead = r.window.texts[r.prompt_id.split("+")[0]] if r.window else ""
            assert r.body["prompt"].startswith(lead + " ") and any(t.startswith(lead) for t in texts[:i])
    assert {r.body["max_tokens"] for r in background} != {16, 32, 64}  # each prompt's own, not the cycle


def test_each_row_says_whether_its_prompts_start_was_sent_before_in_the_window() -> None:
    window = _window(0.5, requests=120)
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["prompt"])
        return httpx.Response(200, json={"choices": [{"text": "hi", "finish_reason": "length"}]})

    def row(request: protocol.Request, exchange: Any) -> dict[str, Any]:
        text = request.window.text(request.prompt_id) if request.role != protocol.MEASURED and request.window \
            else {"capital": "C", "count": "N"}[request.prompt_id]
        return sender.response_row(sender.RunContext("s", "r", "a", 6), request, exchange, text)

    async def send() -> list[dict[str, Any]]:
        client = CompletionClient("http://engine", 10, transport=httpx.MockTransport(answer))
        try:
            return await load_window.send_window(client, window, None, "/health", profile_for("openai"), row)
        finally:
            await client.aclose()

    rows = asyncio.run(send())
    by_order = [json.loads(r["request_json"])["prompt"] for r in rows]
    assert sorted(sent) == sorted(by_order)
    for i, (r, request) in enumerate(zip(rows, window, strict=True)):
        lead = request.window.lead(request.prompt_id) if request.window else None
        start = request.window.texts[lead] if lead and request.window else by_order[i]
        assert r["prefix_seen"] == any(t.startswith(start) for t in by_order[:i]), r["request_id"]
    assert [r["prefix_seen"] for r in rows][:2] == [False, False]
    assert sum(r["prefix_seen"] for r in rows) > len(rows) // 3  # the probes repeat, half the background reuses


def _rows(prompts: list[str], latency_s: float, span_s: float) -> dict[str, Any]:
    n = len(prompts)
    send = np.linspace(0, span_s - latency_s, n) * 1e9
    return {"send_ns": send, "recv_ns": send + latency_s * 1e9, "ok": np.ones(n, dtype=bool),
            "batch_id": np.zeros(n), "prompt_id": prompts, "prefix_seen": [False] + [True] * (n - 1)}


def test_the_report_warns_where_fewer_distinct_prompts_than_requests_in_flight() -> None:
    # 240 requests of 1 s over 10 s: 24 in flight on average (Little's law), as a closed loop of 24 holds
    thin = variety.workload("a", "load", _rows(["capital", "count"] * 120, 1.0, 10.0))
    assert thin.distinct_prompts == 2 and thin.in_flight == pytest.approx(24, rel=0.01)
    assert thin.warning is not None and thin.warning.startswith("2 distinct prompts for 24.")
    assert thin.prefix_seen_share == pytest.approx(239 / 240)
    varied = variety.workload("a", "load", _rows([f"s{i % 40}" for i in range(240)], 1.0, 10.0))
    assert varied.distinct_prompts == 40 and varied.warning is None
