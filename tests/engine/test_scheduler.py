"""Static batching: a window gathers concurrent arrivals, capped by max_num_seqs; metrics count it."""

from __future__ import annotations

from engines import greedy, make_engine, prompt_ids, signature
from refengine.metrics import Metrics
from refengine.scheduler import Scheduler


def _sched(max_num_seqs: int, window_ms: float, **kw) -> Scheduler:
    eng = make_engine(**kw)
    s = Scheduler(eng, Metrics("tiny"), max_num_seqs=max_num_seqs, batch_window_ms=window_ms)
    return s


def test_concurrent_requests_form_one_batch() -> None:
    s = _sched(16, 300)
    jobs = [s.submit(f"r{i}", greedy(prompt_ids(30, salt=i))) for i in range(4)]
    assert s.metrics.waiting == 4
    s.start()
    try:
        results = [j.wait(30) for j in jobs]
    finally:
        s.stop()
    assert all(r.batch_size == 4 for r in results)
    assert s.metrics.batch_sizes == {4: 1}
    assert s.metrics.running == 0 and s.metrics.waiting == 0 and s.metrics.success["length"] == 4
    text = s.metrics.render()
    assert 'refengine:batch_size_total{size="4"} 1' in text
    assert "refengine:max_batch_size 4" in text
    assert 'vllm:request_success_total{model_name="tiny",engine="0",finished_reason="length"} 4' in text
    assert 'vllm:num_requests_running{model_name="tiny",engine="0"} 0' in text


def test_max_num_seqs_caps_batches() -> None:
    s = _sched(2, 300)
    jobs = [s.submit(f"r{i}", greedy(prompt_ids(30, salt=i))) for i in range(5)]
    s.start()
    try:
        sizes = [j.wait(30).batch_size for j in jobs]
    finally:
        s.stop()
    assert sizes == [2, 2, 2, 2, 1]
    assert s.metrics.batch_sizes == {2: 2, 1: 1}


def test_concurrent_identical_requests_match_sequential_by_default() -> None:
    s = _sched(16, 300)
    req = greedy(prompt_ids(50), max_tokens=5)
    alone = signature(s.engine.run_batch([req])[0])
    jobs = [s.submit(f"r{i}", req) for i in range(4)]
    s.start()
    try:
        sigs = {signature(j.wait(30)) for j in jobs}
    finally:
        s.stop()
    assert sigs == {alone}


def test_batch_failure_is_delivered_to_waiters() -> None:
    s = _sched(4, 10)

    def boom(_reqs, _on_token=None):
        raise RuntimeError("kernel exploded")

    s.engine.run_batch = boom  # type: ignore[method-assign]
    job = s.submit("r0", greedy(prompt_ids(10)))
    streamed = s.submit("r1", greedy(prompt_ids(10)), stream=True)
    s.start()
    try:
        try:
            job.wait(10)
            raise AssertionError("expected failure")
        except RuntimeError as exc:
            assert "exploded" in str(exc)
        assert streamed.tokens is not None and streamed.tokens.get(timeout=10) is None  # its stream ends
    finally:
        s.stop()
    assert s.metrics.running == 0
