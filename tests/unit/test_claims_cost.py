"""`orchestrator claims`'s cost_ratio kind: "B costs x times A" at a load point, checked on the report's B/A
(analysis/pairing.py) at the claims' confidence; the file's checks, the verdicts, the windows that would settle it
(an estimate from the pilot's spread), the sizing of a study's load phase and the page."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator import config
from orchestrator.analysis import pairing
from orchestrator.analysis.claims_cost import RatioClaim
from orchestrator.errors import ConfigError
from orchestrator.report.claims import write
from orchestrator.sweep.claims import Cells, answers, sizing
from tests.unit.test_claims import load_text

A_S = [1.00, 1.10, 0.95, 1.05, 1.02, 0.98]  # A's latency per window
NOISE = [1.03, 0.97, 1.01, 0.99, 1.04, 0.96]  # B/A of each window, about 1: B = 2 A, give or take


def _phase(arm: str, values: list[float], steady: bool = True) -> dict[str, Any]:
    return {"arm": arm, "phase": "load", "window_ids": list(range(len(values))), "schedules": ["s"] * len(values),
            "per_window": {"latency_s": values}, "steady": {"steady": steady}}


def _found(steady: bool = True) -> Cells:
    cells = [{"arm": arm, "prompt_id": "capital", "phase": "load", "n": 12, "divergent": 0, "errors": 0}
             for arm in ("baseline", "slow")]
    return Cells(cells, [], [Path("run")], [[_phase("baseline", A_S), _phase(
        "slow", [2 * a * e for a, e in zip(A_S, NOISE, strict=True)], steady)]])


def _claim(more: str, confidence: float = 0.95) -> str:
    return (f"confidence: {confidence}\nclaims:\n  - {{name: c, kind: cost_ratio, arm: slow, baseline: baseline, "
            f"phase: load, metric: latency_s, {more}}}")


@pytest.mark.parametrize(("more", "says"), [
    ("ratio: 2, at_most: 3", "claims[0]: a cost_ratio claim takes one of ratio, at_most or at_least (B's cost over "
                             "A's), got 2"),
    ("ratio: 0", "claims[0].ratio=0.0: must be > 0; a ratio B/A, e.g. 2 for twice A's"),
    ("at_least: 2, baseline_phase: x", "baseline_phase, distinct/of and flips/positions are not a cost_ratio claim's"),
])
def test_a_bad_cost_claim_is_one_line_naming_the_field(more: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_text(_claim(more))
    assert says in str(raised.value)


def test_a_cost_claim_without_its_metric_names_what_it_needs() -> None:
    with pytest.raises(ConfigError, match=r"claims\[0\]\.metric='': must be a load point's metric; e\.g\. latency_s"):
        load_text("claims:\n  - {name: c, kind: cost_ratio, arm: slow, baseline: baseline, phase: load, ratio: 2}")
    with pytest.raises(ConfigError, match=r"metric/ratio are a cost_ratio claim's"):
        load_text("claims:\n  - {name: c, kind: no_crash, arm: slow, ratio: 2}")


def test_the_interval_is_the_reports_at_the_claims_confidence() -> None:
    slow = [2 * a * e for a, e in zip(A_S, NOISE, strict=True)]
    for confidence in (0.95, 0.99):
        [result] = answers(load_text(_claim("ratio: 2", confidence)), _found())
        expected = pairing.paired(A_S, slow, confidence)
        assert (result.lower, result.upper, result.estimate) == (expected.lower, expected.upper, expected.value)
    assert pairing.paired(A_S, slow, 0.99).lower < pairing.paired(A_S, slow).lower  # wider at 99 %


@pytest.mark.parametrize(("more", "verdict"), [
    ("ratio: 2", "replicated"),  # about 1.97 to 2.04: inside 1.8 to 2.2
    ("ratio: 3", "contradicted"),  # wholly below 2.7
    ("at_most: 1.5", "contradicted"), ("at_least: 1.5", "replicated"),
    ("ratio: 2, margin: 0.01", "inconclusive"),  # 1.98 to 2.02 is narrower than the interval
])
def test_the_verdict_is_where_the_interval_lies_against_the_band(more: str, verdict: str) -> None:
    [result] = answers(load_text(_claim(more)), _found())
    assert result.verdict == verdict, (result.lower, result.upper)
    assert (result.k, result.n) == (6, 6)  # windows a side


def test_an_inconclusive_ratio_gets_the_windows_that_would_settle_it_as_an_estimate() -> None:
    [result] = answers(load_text(_claim("ratio: 2, margin: 0.01")), _found())
    assert result.n_needed is not None and result.n_needed > 6
    band = RatioClaim(1.98, 2.02, 0.95)
    log_sd = pairing.paired(A_S, [2 * a * e for a, e in zip(A_S, NOISE, strict=True)]).log_sd
    assert log_sd is not None and result.estimate is not None
    assert band.power(result.estimate, log_sd, result.n_needed) >= 0.8 > band.power(
        result.estimate, log_sd, result.n_needed - 1)
    assert any("an estimate from the pilot's variance" in note for note in result.notes)


def test_a_load_point_not_steady_gives_no_interval_and_no_verdict() -> None:
    [result] = answers(load_text(_claim("ratio: 3")), _found(steady=False))
    assert result.verdict == "inconclusive" and math.isnan(result.lower) and result.n_needed is None
    assert "no interval: slow not steady (docs/load.md)" in result.notes


def test_a_metric_the_load_point_lacks_is_refused_naming_those_it_has() -> None:
    with pytest.raises(ConfigError, match=r"claims\[0\]\.metric='latency' names nothing that exists\. Did you mean "
                                          r"'latency_s'\?"):
        answers(load_text(_claim("ratio: 2").replace("latency_s", "latency")), _found())


def test_sizing_gives_the_load_phase_the_windows_it_lacks_capped_by_max_n() -> None:
    typed = config.to_typed(config.compose(["study=load_planted_cost"]))  # 6 windows of 12 requests
    claims = load_text(_claim("ratio: 2, margin: 0.01"))
    results = answers(claims, _found())
    needed = results[0].n_needed
    assert needed is not None and sizing(typed, claims, results) == [
        f"protocol.phases.load.load.windows={needed - 6}"]
    claims.max_n = 120  # 10 windows of 12
    assert sizing(typed, claims, results) == ["protocol.phases.load.load.windows=10"]
    replicated = load_text(_claim("ratio: 2"))
    assert sizing(typed, replicated, answers(replicated, _found())) == []  # settled: nothing more


def test_the_page_gives_the_ratio_and_its_interval(tmp_path: Path) -> None:
    claims = load_text(_claim("ratio: 3"))
    pages = write(answers(claims, _found()), claims, [Path("run")], tmp_path)
    text = pages.markdown.read_text()
    assert "| c | latency_s: B/A = 3 +- 10 % | CONTRADICTED | windows B 6, A 6 | 1.9" in text
    assert "an interval that excludes the claim (latency_s: B/A = 3 +- 10 %)" in text
    assert "A cost ratio B/A is the report's" in text
    assert json.loads(pages.json.read_text())["claims"][0]["scale"] == "ratio"
    blank = write(answers(claims, _found(steady=False)), claims, [Path("run")], tmp_path)
    assert json.loads(blank.json.read_text())["claims"][0]["lower"] is None  # JSON has no NaN
