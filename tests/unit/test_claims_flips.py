"""`orchestrator claims`'s flips_at kind: "F top-1 flips in N requests" (over positions [from, to)), counted per
request from the record, not from the cell's summary (which lists its first 8 flip positions only). On a committed
H100 run dir (docs/probe-results/h100-2026-12-06-48/graphs_static/graphs: the eager arm's capital cell at load_8
has 101 flips at 21 positions in 16 requests)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.analysis.claims_flips import flip_counts
from orchestrator.errors import ConfigError
from orchestrator.report.claims import write
from orchestrator.sweep.claims import Cells, answers, sizing
from tests.unit.test_claims import load_text

RUN = config.CONF_DIR.parent / "docs" / "probe-results" / "h100-2026-12-06-48" / "graphs_static" / "graphs"
CELL = "arm: eager, phase: load_8, prompt: capital"


def _claim(more: str) -> str:
    return f"claims:\n  - {{name: f, kind: flips_at, {CELL}, {more}}}"


@pytest.fixture(scope="module")
def found() -> Cells:
    return Cells.read([RUN])


def test_the_counts_per_request_sum_to_the_cells_flips_past_its_listed_positions(found: Cells) -> None:
    [cell] = [c for c in found.cells if (c["arm"], c["prompt_id"], c["phase"]) == ("eager", "capital", "load_8")]
    assert cell["top1_flip_position_count"] > len(cell["top1_flip_positions"])  # the summary lists only the first
    counted = flip_counts(found.records, ("eager", "load_8", "capital"), None)
    assert (sum(counted.counts), len(counted.counts)) == (cell["top1_flips"], cell["n"]) == (101, 16)
    listed_last = cell["top1_flip_positions"][-1][0]
    past = flip_counts(found.records, ("eager", "load_8", "capital"), (listed_last + 1, 10_000))
    assert sum(past.counts) == 101 - sum(flips for _, flips in cell["top1_flip_positions"]) > 0


@pytest.mark.parametrize(("more", "verdict"), [
    ("flips: 400, of: 16", "contradicted"),  # 25 a request: above the interval, about 1 to 12
    ("flips: 101, of: 16", "inconclusive"),  # the count itself: the band +-10 % lies inside a wide interval
    ("flips: 0, of: 16", "contradicted"),  # 5 of 16 requests flip
    ("flips: 0, of: 16, positions: [0, 11]", "inconclusive"),  # no flip before position 11; 16 cannot replicate
])
def test_the_verdict_on_the_count_a_request(found: Cells, more: str, verdict: str) -> None:
    [result] = answers(load_text(_claim(more)), found)
    assert result.verdict == verdict, (result.k, result.n, result.lower, result.upper)


def test_a_count_claims_interval_is_t_on_the_requests_counts(found: Cells) -> None:
    import statistics

    from orchestrator.analysis.stats import t_quantile

    [result] = answers(load_text(_claim("flips: 400, of: 16")), found)
    counts = flip_counts(found.records, ("eager", "load_8", "capital"), None).counts
    half = t_quantile(0.975, 15) * statistics.stdev(counts) / math.sqrt(16)
    assert result.estimate == pytest.approx(101 / 16) and result.upper == pytest.approx(101 / 16 + half)
    assert result.lower == pytest.approx(max(0.0, 101 / 16 - half))
    assert result.scale == "count" and result.n_needed is not None


def test_an_inconclusive_count_gets_the_requests_that_would_settle_it_and_sizing_gives_them(found: Cells) -> None:
    claims = load_text(_claim("flips: 101, of: 16, margin: 0.5"))
    [result] = answers(claims, found)
    assert result.verdict == "inconclusive" and result.n_needed is not None and result.n_needed > 16
    assert any("an estimate from the pilot's variance" in note for note in result.notes)
    typed = config.to_typed(config.compose(["study=batch_invariance"]))
    claims = load_text("claims:\n  - {name: f, kind: flips_at, arm: variant, phase: sequential, prompt: capital, "
                       "flips: 10, of: 5}")
    empty = {"arm": "variant", "prompt_id": "capital", "phase": "sequential", "n": 0}
    shaped = answers(claims, Cells([*found.cells, empty], [], [RUN]))
    assert shaped[0].n_needed is None and sizing(typed, claims, shaped) == []  # no pilot: cannot size, none asked
    piloted = [dataclasses.replace(shaped[0], n_needed=40)]
    assert sizing(typed, claims, piloted) == ["protocol.phases.sequential.repeats=40"]


@pytest.mark.parametrize(("more", "says"), [
    ("flips: 3", "a flips_at claim takes `flips: F` and `of: N`"),
    ("flips: -1, of: 8", "claims[0].flips=-1: must be >= 0; a count"),
    ("flips: 1, of: 8, positions: [5, 2]", "claims[0].positions=[5, 2]: must be [from, to] with 0 <= from < to"),
    ("flips: 1, of: 8, at_most: 0", "at_most, at_least, baseline, baseline_phase, distinct, metric and ratio are "
                                    "other kinds'"),
])
def test_a_bad_flip_claim_is_one_line_naming_the_field(more: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_text(_claim(more))
    assert says in str(raised.value)


def test_the_page_gives_the_count_a_request(found: Cells, tmp_path: Path) -> None:
    claims = load_text(_claim("flips: 400, of: 16"))
    pages = write(answers(claims, found), claims, [RUN], tmp_path)
    text = pages.markdown.read_text()
    assert "| f | 400 flips in 16 requests: 25 a request +- 10 % | CONTRADICTED | 101 flips in 16 requests |" in text
    assert "mean 6.31 a request" in text and "A flip count is read from the record" in text
    assert json.loads(pages.json.read_text())["claims"][0]["k"] == 101
