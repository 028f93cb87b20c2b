"""The prefix cache (`--enable-prefix-caching`): off, every request of a prompt is prefilled alike; on, a
prompt's repeats get its kept block-aligned prefix from the cache and run another path, so the first request
differs from its repeats and the repeats from each other not at all; a reset makes the next request cold again."""

from __future__ import annotations

import json
import urllib.request

from engines import greedy, make_engine, prompt_ids, signature
from refengine import cli
from refengine.config import EngineConfig
from refengine.prefix_cache import BLOCK_TOKENS, PrefixCache
from refengine.server import build_app, make_server, serve_in_thread

CAPITAL = list(b"The capital of France is")  # 24 tokens: one full block short of its last token
COUNT = list(b"Count from one to ten: one, two,")  # 32: two full blocks, but the last token is always computed


def _runs(prompt: list[int], n: int = 4, **kw: object) -> list:
    engine = make_engine(**kw)
    return [engine.run_batch([greedy(prompt)])[0] for _ in range(n)]


def test_off_by_default_every_request_prefilled_alike() -> None:
    for prompt in (CAPITAL, COUNT, prompt_ids(100)):
        runs = _runs(prompt)
        assert [r.cached_tokens for r in runs] == [0] * 4
        assert len({signature(r) for r in runs}) == 1


def test_on_the_first_request_differs_from_its_repeats() -> None:
    for prompt, cached in ((CAPITAL, 16), (COUNT, 16), (prompt_ids(100), 96)):
        runs = _runs(prompt, prefix_cache=True)
        assert [r.cached_tokens for r in runs] == [0, cached, cached, cached]
        assert signature(runs[0]) != signature(runs[1])
        assert len({signature(r) for r in runs[1:]}) == 1
        assert signature(runs[0]) == signature(_runs(prompt, n=1)[0])  # the cold one is what the cache-off engine gives


def test_a_reset_makes_the_next_request_cold() -> None:
    engine = make_engine(prefix_cache=True)
    first, hit = (engine.run_batch([greedy(CAPITAL)])[0] for _ in range(2))
    assert engine.reset_prefix_cache() == 1  # one block was held
    again = engine.run_batch([greedy(CAPITAL)])[0]
    assert (hit.cached_tokens, again.cached_tokens) == (16, 0)
    assert signature(again) == signature(first)
    assert make_engine().reset_prefix_cache() == 0  # off: nothing to drop, and no error


def test_a_shared_prefix_is_served_across_prompts_block_by_block() -> None:
    engine = make_engine(prefix_cache=True)
    engine.run_batch([greedy(prompt_ids(40))])  # keeps blocks [0, 16) and [16, 32)
    other = prompt_ids(40)[:20] + prompt_ids(30, salt=7)[:20]  # shares only the first block
    assert engine.run_batch([greedy(other)])[0].cached_tokens == BLOCK_TOKENS


def test_prompt_logprobs_are_never_served_from_the_cache() -> None:
    engine = make_engine(prefix_cache=True)
    engine.run_batch([greedy(CAPITAL)])
    res = engine.run_batch([greedy(CAPITAL, prompt_logprobs=2)])[0]
    assert res.cached_tokens == 0 and res.prompt_logprobs is not None and len(res.prompt_logprobs) == len(CAPITAL)


def test_the_oldest_blocks_go_first() -> None:
    engine = make_engine(prefix_cache=True)
    engine.prefix_cache = PrefixCache(capacity_blocks=1)
    engine.run_batch([greedy(CAPITAL)])
    engine.run_batch([greedy(COUNT)])  # its two blocks push CAPITAL's out
    assert engine.run_batch([greedy(CAPITAL)])[0].cached_tokens == 0


def test_the_flag_is_vllms_and_off_by_default() -> None:
    parser = cli.build_parser()
    assert not cli.config_from_args(parser.parse_args([])).prefix_cache
    assert cli.config_from_args(parser.parse_args(["--enable-prefix-caching"])).prefix_cache
    assert not cli.config_from_args(parser.parse_args(["--no-enable-prefix-caching"])).prefix_cache
    assert "--enable-prefix-caching" in cli.KNOWN_FLAGS and "--no-enable-prefix-caching" in cli.KNOWN_FLAGS


def test_served_as_vllm_reports_it_usage_and_reset_route() -> None:
    """usage.prompt_tokens_details.cached_tokens per answer (streamed too), POST /reset_prefix_cache: 200."""
    app = build_app(EngineConfig(max_model_len=1024, batch_window_ms=1, prefix_cache=True), log_startup=False)
    server = make_server(app, "127.0.0.1", 0)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def post(path: str, body: dict | None) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else b""
        with urllib.request.urlopen(urllib.request.Request(base + path, data=data, method="POST"), timeout=60) as r:
            return r.status, r.read()

    def cached(stream: bool = False) -> int:
        body = {"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        _, raw = post("/v1/completions", body)
        doc = json.loads(raw if not stream else [e for e in raw.split(b"data: ") if b'"usage"' in e][-1])
        return int(doc["usage"]["prompt_tokens_details"]["cached_tokens"])

    try:
        assert [cached(), cached(), cached(stream=True)] == [0, 16, 16]
        assert post("/reset_prefix_cache", None) == (200, b"")
        assert cached() == 0
    finally:
        server.shutdown()
        server.server_close()
        app.scheduler.stop()
