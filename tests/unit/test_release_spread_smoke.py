"""bench/release_spread.py at a tiny size: its recording server sees every request of every batch, each
batch whole and held until its last request, with a kernel timestamp, and no method has an error (no timing
asserted: the spreads are the benchmark's to print)."""

from __future__ import annotations

import json

from tests import benches


def test_every_request_recorded_together_without_errors() -> None:
    bench = benches.load("release_spread")
    methods = list(bench.METHODS)
    results = bench.run([8], batches=2, methods=methods)
    assert sorted((r.method, r.n) for r in results) == sorted((m, 8) for m in methods for _ in range(2))
    assert [(r.recorded, r.errors, r.stray, r.untimed) for r in results] == [(8, 0, 0, 0)] * len(results)
    assert all(r.together and r.spread_ns is not None for r in results)
    table, _ = bench.report(results, methods)
    assert "N=8: project/bare worst" in table


def test_a_request_outside_a_batch_is_counted_not_hidden() -> None:
    bench = benches.load("release_spread")
    with bench.RecordingServer() as server:
        server.command("batch 0")
        failed = bench.bare(server.port, 1)  # answered at once: nothing holds it
        seen = json.loads(server.command("end"))
    assert failed == 0 and (seen["recorded"], seen["stray"], seen["errors"]) == (0, 1, 0)
