"""The prefix cache as a variable (docs/usage.md, docs/reference-engine.md "Prefix cache"): the neutral setting
`prefix_cache` in the profiles that have one, each answer's usage.prompt_tokens_details.cached_tokens as the
responses' `cached_prompt_tokens`, `protocol.flush_prefix_cache` (its values, what `check` says of an engine
without a route or without the env its route needs, the flushes sent), and the report's observation of it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from orchestrator import cli, config
from orchestrator.analysis.prefix_served import prefix_served
from orchestrator.config import prefix_flush
from orchestrator.config.schema import Config
from orchestrator.engines import ENGINES
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, read_run
from orchestrator.record.tables import read_table
from orchestrator.run import refusals
from orchestrator.run.study import StudyRunner
from orchestrator.runtime.fake import FakeRuntime
from orchestrator.runtime.spec import ContainerSpec
from tests.fake_engine import engine, fake_runtime

ANSWER = {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
          "usage": {"prompt_tokens": 24, "completion_tokens": 1}}


@pytest.mark.parametrize(("name", "flag"), [("vllm", "enable-prefix-caching"), ("reference", "enable-prefix-caching"),
                                            ("transformers_hooked", None), ("transformers_serve", None),
                                            ("openai", None)])
def test_the_neutral_setting_is_the_engine_s_switch_where_it_has_one(name: str, flag: str | None) -> None:
    profile = ENGINES[name]
    assert profile.settings.get("prefix_cache") == flag
    expected = {True: True, False: False, None: None} if flag else {True: None, False: None, None: None}
    for value, meant in expected.items():
        assert profile.setting({"enable-prefix-caching": value}, "prefix_cache") is meant
    # a route to empty it: vLLM's (in its dev mode) and the reference engine's; none where there is no cache
    assert (profile.endpoints.reset_prefix_cache is not None) == (flag is not None)
    assert dict(profile.reset_prefix_cache_env) == ({"VLLM_SERVER_DEV_MODE": "1"} if name == "vllm" else {})


@pytest.mark.parametrize(("usage", "cached"), [
    ({"prompt_tokens_details": {"cached_tokens": 16}}, 16),
    ({"prompt_tokens_details": {"cached_tokens": 0}}, 0),
    ({"prompt_tokens_details": None}, None),  # vLLM without --enable-prompt-tokens-details
    ({}, None),
    ({"prompt_tokens_details": {"cached_tokens": "many"}}, None),  # informative only: no problem, no value
])
def test_usage_says_how_many_prompt_tokens_the_cache_served(usage: dict[str, object], cached: int | None) -> None:
    body = {**ANSWER, "usage": {**ANSWER["usage"], **usage}}
    parsed = ENGINES["reference"].parse(json.dumps(body).encode())
    assert parsed.cached_prompt_tokens == cached and parsed.error is None
    streamed = (f"data: {json.dumps({**body, 'usage': None})}\n\n"
                f"data: {json.dumps({'choices': [], 'usage': body['usage']})}\n\ndata: [DONE]\n\n")
    assert ENGINES["vllm"].parse(streamed.encode()).cached_prompt_tokens == cached


def test_a_flush_setting_outside_its_values_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "protocol.flush_prefix_cache=always"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == ["error: protocol.flush_prefix_cache: Invalid value 'always', expected one of [never, "
                     "between_requests, between_phases] (on the command line)"]


def _typed(*overrides: str) -> Config:
    return config.to_typed(config.compose(["~arms.wide_batch", *overrides]))


def test_check_refuses_a_flush_the_engine_would_refuse_and_warns_where_it_has_no_route() -> None:
    vllm = ("arm@arms.baseline=vllm_cpu", "protocol.flush_prefix_cache=between_phases")
    checked = refusals.config_check(_typed(*vllm))
    assert checked.problems == [
        "protocol.flush_prefix_cache is between_phases, but arm 'baseline' (engine vllm) serves /reset_prefix_cache "
        "only with VLLM_SERVER_DEV_MODE=1: set arms.baseline.env.VLLM_SERVER_DEV_MODE: \"1\", or "
        "protocol.flush_prefix_cache: never"]
    assert refusals.config_check(_typed(*vllm, "+arms.baseline.env.VLLM_SERVER_DEV_MODE='1'")).problems == []
    hooked = _typed("arm@arms.baseline=transformers_hooked", "protocol.flush_prefix_cache=between_requests")
    assert prefix_flush.warnings(hooked, refusals.config_check(hooked).arms) == [
        "protocol.flush_prefix_cache is between_requests, but arm 'baseline' (engine transformers_hooked) has no "
        "route to empty a prefix cache: its requests are sent unflushed"]
    for typed in (_typed("protocol.flush_prefix_cache=between_requests"), _typed("arm@arms.baseline=vllm_cpu")):
        checked = refusals.config_check(typed)  # the reference engine's route needs nothing; never asks nothing
        assert checked.problems == [] and prefix_flush.warnings(typed, checked.arms) == []


def _caching(flushes: list[str], answer: int = 200):  # type: ignore[no-untyped-def]
    """The fake engine with a prefix cache that serves 16 tokens of a prompt it has seen, and its reset route."""
    base = engine()

    def factory(spec: ContainerSpec):  # type: ignore[no-untyped-def]
        server, seen = base(spec), set()
        inner = server.handler

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/reset_prefix_cache":
                flushes.append(spec.name)
                seen.clear()
                return httpx.Response(answer)
            response = inner(request)
            if request.url.path != "/v1/completions":
                return response
            prompt = json.loads(request.content)["prompt"]
            doc = response.json()
            doc["usage"]["prompt_tokens_details"] = {"cached_tokens": 16 if prompt in seen else 0}
            seen.add(prompt)
            return httpx.Response(200, json=doc)

        server.handler = handler
        return server
    return factory


def _study(tmp_path: Path, flush: str, answer: int = 200, *overrides: str, image: str = "fake-cache"
           ) -> tuple[StudyRunner, RunPaths, list[str]]:
    typed = config.to_typed(config.compose(["study=prefix_cache", f"protocol.flush_prefix_cache={flush}",
                                            *overrides]))
    flushes: list[str] = []
    runtime: FakeRuntime = fake_runtime()
    runtime.images["fake-cache"] = _caching(flushes, answer)
    for arm in typed.arms.values():
        arm.image, arm.build.context = image, None
    paths = RunPaths(tmp_path / flush)
    runner = StudyRunner(typed, paths, f"run-{flush}", runtime, say=lambda _: None)
    runner.run()
    runner.cleanup()
    return runner, paths, flushes


@pytest.mark.parametrize(("flush", "per_arm", "cached"), [
    ("never", 0, [0, 16, 16, 16, 16, 16, 16, 16, 16, 0, 16, 16, 16, 16, 16, 16, 16]),
    ("between_phases", 2, [0, 0, 16, 16, 16, 16, 16, 16, 16, 0, 16, 16, 16, 16, 16, 16, 16]),  # cold, then measured
    ("between_requests", 17, [0] * 17),
])
def test_the_flushes_sent_and_what_each_request_was_served(tmp_path: Path, flush: str, per_arm: int,
                                                           cached: list[int]) -> None:
    runner, paths, flushes = _study(tmp_path, flush)
    assert runner.failed == []
    assert len(flushes) == 2 * per_arm  # two arms
    rows = read_table(paths, "responses").to_pylist()
    for arm in ("uncached", "cached"):
        assert [r["cached_prompt_tokens"] for r in rows if r["arm"] == arm] == cached
    served = prefix_served(Recorded.of([read_run(paths)]))
    measured_served = sum(c > 0 for c in cached[1:])
    assert {s.arm: (s.measured, s.said, s.served, s.off_held) for s in served} == {
        arm: (16, 16, measured_served, measured_served == 0) for arm in ("uncached", "cached")}


def test_a_flush_the_engine_refuses_fails_the_arm_and_nothing_after_it_is_sent(tmp_path: Path) -> None:
    runner, paths, flushes = _study(tmp_path, "between_requests", answer=404)
    assert runner.failed == ["uncached", "cached"] and len(flushes) == 2  # each arm's first flush
    arms = {row["arm"]: row for row in read_table(paths, "arms").to_pylist()}
    assert ("the prefix cache could not be emptied before sequential/capital (protocol.flush_prefix_cache: "
            "between_requests): POST /reset_prefix_cache answered HTTP 404") in arms["cached"]["error"]
    rows = read_table(paths, "responses").to_pylist()
    assert len(rows) == 2 * 17 and all(r["http_status"] is None and r["error"].startswith("not sent: ") for r in rows)


def test_an_engine_that_says_only_where_tokens_were_served_said_0_by_saying_nothing(tmp_path: Path) -> None:
    """vLLM gives usage.prompt_tokens_details only to a request served cached tokens, and only under
    --enable-prompt-tokens-details (its presets set it): with it, silence is 0; without, not observable."""
    runner, paths, _ = _study(tmp_path, "never", 200, "arm@arms.uncached=vllm_cpu", "arm@arms.cached=vllm_cpu",
                              "arms.cached.engine_args.enable-prompt-tokens-details=false", image="fake-engine")
    assert runner.failed == []
    assert {r["cached_prompt_tokens"] for r in read_table(paths, "responses").to_pylist()} == {None}
    served = {s.arm: (s.said, s.served, s.off_held) for s in prefix_served(Recorded.of([read_run(paths)]))}
    assert served == {"uncached": (16, 0, True), "cached": (0, 0, None)}


def test_the_report_says_whether_the_precondition_held_as_observed() -> None:
    from orchestrator.analysis.prefix_served import PrefixServed
    from orchestrator.report.prefix_cache_md import section

    rows = [PrefixServed("off", 16, 16, 0, 0), PrefixServed("on", 16, 16, 15, 16), PrefixServed("silent", 16, 3, 0, 0)]
    table = [line for line in section(rows) if line.startswith("| ") and "---" not in line][1:]
    assert table == ["| off | 16 | 16 | 0 | 0 | held |", "| on | 16 | 16 | 15 | 16 | **not held** |",
                     "| silent | 16 | 3 | 0 | 0 | not observable |"]
    assert section([]) == []  # no engine said anything: no section
