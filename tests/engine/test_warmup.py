"""The planted warm-up (--warmup-slow-requests N --warmup-delay-ms D): every step of a batch begun before the engine
served N requests sleeps D ms more, later ones do not, and the answers are the same as without it. The sleeps are
recorded, not timed."""

from __future__ import annotations

import pytest
from refengine import cli, engine

from tests.engine.engines import greedy, make_engine, prompt_ids, signature


def test_batches_begun_before_n_requests_are_slower_and_answer_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    slept_ms: list[float] = []
    monkeypatch.setattr(engine.time, "sleep", lambda s: slept_ms.append(round(s * 1000, 6)))
    warming = make_engine(step_delay_ms=1, warmup_slow_requests=3, warmup_delay_ms=50)
    plain = make_engine(step_delay_ms=1)
    batches = [[greedy(prompt_ids(20, salt=2 * b + i), max_tokens=2) for i in range(2)] for b in range(3)]
    answers = [warming.run_batch(batch) for batch in batches]
    # Each batch: a prefill and one decode step. Served before each: 0, 2 (both under 3), then 4.
    assert slept_ms == [51, 51, 51, 51, 1, 1]
    assert warming.served == 6
    for batch, got in zip(batches, answers, strict=True):
        assert [signature(r) for r in got] == [signature(r) for r in plain.run_batch(batch)]


def test_the_flags_reach_the_config() -> None:
    ns = cli.build_parser().parse_args(["--warmup-slow-requests", "25", "--warmup-delay-ms", "100"])
    cfg = cli.config_from_args(ns)
    assert (cfg.warmup_slow_requests, cfg.warmup_delay_ms) == (25, 100.0)
