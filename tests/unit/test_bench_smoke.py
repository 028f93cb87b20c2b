"""bench/compare_bench.py at a tiny size: the generator's injected answers are what compare() and the
plain per-row implementation find (no timing asserted; detllm is not involved)."""

from __future__ import annotations

from orchestrator.analysis.compare import compare
from orchestrator.record.paths import RunPaths
from tests import benches


def test_generator_answers_match_ours_and_plain(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bench = benches.load("compare_bench")
    expected = bench.generate(tmp_path, responses=300, positions=8, top_k=5, cell_rows=25, part_rows=40)
    assert len(expected.cells) == 12 and expected.divergent_rows > 0
    assert any(c["divergent"] == 0 for c in expected.cells.values())  # a clean cell too
    assert len(list((tmp_path / "data" / "responses").glob("*.parquet"))) == 8  # cells span part files

    result = compare(RunPaths(tmp_path)).to_json()
    ours = [{k: c[k] for k in ("arm", "prompt_id", "phase", *bench.CHECKED)} for c in result["cells"]]
    assert bench.check(ours, expected, "ours") == expected.divergent_rows
    assert bench.check(bench.plain_compare(tmp_path), expected, "plain") == expected.divergent_rows
    assert sum(c["n"] for c in result["cells"]) == 300 - 2  # the first row of each arm is cold
    assert [c["matches_warm"] for c in result["cold"]] == [True, True]
