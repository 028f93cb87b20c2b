"""`orchestrator claims`: the claims file's checks (one line each, exit 2), each kind's test (the interval, the
power, the n that settles it), the verdicts on hand-made cells, the sizing of a study's phases and the page."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator import config
from orchestrator.analysis import claims as rates
from orchestrator.analysis.claims_ab import DifferenceClaim
from orchestrator.analysis.rates import compare_rates
from orchestrator.analysis.stats import divergence_bound, repeats_for_bound
from orchestrator.config.claims import ClaimsConfig, load
from orchestrator.errors import ConfigError
from orchestrator.report.claims import write
from orchestrator.sweep.claims import Cells, answers, sizing
from tests.conftest import orchestrator

GOOD = """
claims:
  - {name: on diverges, kind: divergence_rate, arm: variant, phase: over_capacity, at_least: 0.1}
  - {name: off identical, kind: divergence_rate, arm: invariant, phase: over_capacity, at_most: 0}
  - {name: 1 in 6, kind: distinct, arm: variant, phase: sequential, distinct: 1, of: 6}
  - {name: on never diverges, kind: divergence_rate, arm: variant, phase: over_capacity, at_most: 0}
  - {name: under 1 %, kind: divergence_rate, arm: invariant, phase: sequential, at_most: 0, margin: 0.01}
  - {name: B - A, kind: ab_difference, arm: variant, baseline: invariant, phase: over_capacity, at_least: 0.1}
  - {name: no flip, kind: no_top1_flip, arm: invariant}
  - {name: no crash, kind: no_crash, arm: variant}
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(text)
    return path


def _cell(arm: str, prompt: str, phase: str, n: int, divergent: int, **more: Any) -> dict[str, Any]:
    return {"arm": arm, "prompt_id": prompt, "phase": phase, "n": n, "divergent": divergent, "errors": 0,
            "distinct_signatures": 1 + (divergent > 0), "top1_flips": 0, "top1_flip_positions": [],
            "stopped_after": None, "batch_size": None, **more}


def _cells(n: int) -> Cells:
    """Two prompts of the batch_invariance study: the variant's batches over capacity part 4 in 20."""
    cells = [_cell(arm, prompt, phase, n, n // 5 if (arm, phase) == ("variant", "over_capacity") else 0)
             for arm in ("invariant", "variant") for prompt in ("capital", "count")
             for phase in ("sequential", "over_capacity")]
    return Cells(cells, [{"arm": "invariant", "status": "completed"}, {"arm": "variant", "status": "completed"}],
                 [Path("run")])


@pytest.mark.parametrize(("text", "says"), [
    ("claims:\n  - {name: a, kind: divergence_rate, arm: x, at_most: 0, margn: 0.1}",
     "unknown key 'margn' in claims.0. Did you mean 'margin'?"),
    ("claims:\n  - {name: a, kind: divergence, arm: x, at_most: 0}",
     "claims[0].kind='divergence' names nothing that exists. Did you mean 'divergence_rate'? Available: "
     "ab_difference, cost_ratio, distinct, divergence_rate, flips_at, no_crash, no_top1_flip, onset"),
    ("claims:\n  - {name: a, kind: divergence_rate, arm: x, at_most: 2}", "claims[0].at_most=2.0: must be in [0, 1]"),
    ("claims:\n  - {name: a, kind: divergence_rate, arm: x}", "takes one of at_most or at_least"),
    ("claims:\n  - {name: a, kind: distinct, arm: x, distinct: 3, of: 6}",
     "claims[0].distinct=3: must be 1 or 6 (all identical, or all distinct)"),
    ("claims:\n  - {name: a, kind: ab_difference, arm: x, at_least: 0.1}", "`baseline` (arm A)"),
    ("confidence: 1.5\nclaims:\n  - {name: a, kind: no_crash, arm: x}", "confidence=1.5: must be in (0, 1)"),
    ("power: high\nclaims:\n  - {name: a, kind: no_crash, arm: x}", "power"),
    ("claims:\n  - {name: a, kind: onset, arm: x, onset: -5, search: s}", "onset=-5: must be above 0"),
    ("claims: []", "claims=[]: must be a list of one or more claims"),
])
def test_a_bad_claims_file_is_one_line_naming_the_field(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(_file(tmp_path, text))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_an_unknown_key_does_not_hide_the_file_s_other_problems(tmp_path: Path) -> None:
    """Every problem in one go: before, an unknown key stopped the check, and a typo fixed showed the next."""
    text = "claims:\n  - {name: a, kind: divergence_rate, arm: x, at_most: 2, margn: 0.1}\n  - {name: b, kind: nope}"
    with pytest.raises(ConfigError) as caught:
        load(_file(tmp_path, text))
    said = str(caught.value)
    assert "unknown key 'margn' in claims.0" in said and "claims[0].at_most=2.0: must be in [0, 1]" in said
    assert "claims[1].kind='nope'" in said


def test_a_bad_claims_file_exits_2_in_one_line(tmp_path: Path) -> None:
    result = orchestrator("claims", str(_file(tmp_path, "claims:\n  - {name: a, kind: nope, arm: x}")),
                          "--run", str(tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "claims[0].kind='nope'" in result.stderr


def test_at_most_zero_needs_the_bound_the_report_gives() -> None:
    """"Never diverges", false by 10 points: the n whose zero-divergence bound is 10 % (29) is where both the
    power and the chance to replicate reach 80 %; by 1 point, 299."""
    test = rates.RateClaim(0.0, False, 0.1, 0.95)
    assert test.n_needed(0.8) == repeats_for_bound(0.1) == 29
    assert rates.RateClaim(0.0, False, 0.01, 0.95).n_needed(0.8) == repeats_for_bound(0.01) == 299
    assert test.power(16) == pytest.approx(1 - 0.9 ** 16)  # any divergence contradicts it
    assert test.assurance(28) == 0 and test.assurance(29) == 1  # 0 of 28: upper bound 10.2 %, above the margin


def test_power_is_the_binomial_chance_of_the_contradicting_counts() -> None:
    """At most 20 %, false at 30 %: the power is P(K >= k*) under Binomial(n, 0.3), k* the first count whose
    interval's lower end is past 20 %."""
    test, n = rates.RateClaim(0.2, False, 0.1, 0.95), 150
    k_star = next(k for k in range(n + 1) if divergence_bound(k, n)[0] > 0.2)
    exact = sum(math.comb(n, k) * 0.3 ** k * 0.7 ** (n - k) for k in range(k_star, n + 1))
    assert test.power(n) == pytest.approx(exact, rel=1e-9)
    assert test.n_needed(0.8) == 155


def test_verdicts_on_the_cells_true_claims_replicated_the_false_one_contradicted() -> None:
    found = answers(load_text(GOOD), _cells(20))
    verdict = {r.name: r.verdict for r in found}
    assert verdict == {"on diverges": "replicated", "off identical": "replicated", "1 in 6": "replicated",
                       "on never diverges": "contradicted", "under 1 %": "inconclusive", "B - A": "replicated",
                       "no flip": "replicated", "no crash": "replicated"}
    false = next(r for r in found if r.name == "on never diverges")
    assert (false.k, false.n) == (8, 40) and false.lower > 0  # the interval that excludes "at most 0"
    assert (false.lower, false.upper) == divergence_bound(8, 40)
    under = next(r for r in found if r.name == "under 1 %")
    assert under.n_needed == 299 and under.power < 0.8
    ab = next(r for r in found if r.name == "B - A")
    assert (ab.lower, ab.upper) == (compare_rates(0, 40, 8, 40).lower_95, compare_rates(0, 40, 8, 40).upper_95)
    assert (ab.baseline_k, ab.baseline_n) == (0, 40)


def test_an_underpowered_claim_is_inconclusive_with_the_n_that_settles_it() -> None:
    [off] = answers(load_text("claims:\n  - {name: off, kind: divergence_rate, arm: invariant, "
                              "phase: over_capacity, at_most: 0}"), _cells(5))  # 10 requests: bound 26 %
    assert (off.verdict, off.n, off.n_needed) == ("inconclusive", 10, 29)
    assert off.power == pytest.approx(1 - 0.9 ** 10)


def test_a_crash_and_a_flip_contradict() -> None:
    found = _cells(10)
    found.arms[1] = {"arm": "variant", "status": "failed", "error": "engine died"}
    found.cells[0]["top1_flips"], found.cells[0]["top1_flip_positions"] = 7, [(3, 2), (4, 2)]
    crash, flip = answers(load_text("claims:\n  - {name: c, kind: no_crash, arm: variant}\n"
                                    "  - {name: f, kind: no_top1_flip, arm: invariant}"), found)
    assert (crash.verdict, crash.k) == ("contradicted", 1) and "engine died" in crash.notes[0]
    assert (flip.verdict, flip.k) == ("contradicted", 2)  # the most flips at one position: 2 requests at least


def test_a_claim_on_a_cell_the_runs_lack_names_the_ones_they_have() -> None:
    with pytest.raises(ConfigError, match=r"claims\[0\].arm='varient' names nothing that exists. Did you mean "
                                          "'variant'"):
        answers(load_text("claims:\n  - {name: a, kind: no_crash, arm: varient}"), _cells(5))


def test_a_difference_claim_sized_for_its_power() -> None:
    test = DifferenceClaim(0.1, True, 0.1, 0.95, 0.0)
    n = test.n_needed(0.8)
    assert n is not None and test.power(n) >= 0.8 and test.assurance(n) >= 0.8 and test.assurance(n - 1) < 0.8


def test_sizing_gives_each_phase_what_its_claims_lack_and_never_less() -> None:
    typed = config.to_typed(config.compose(["study=batch_invariance"]))
    claims = load_text(GOOD)
    overrides = sizing(typed, claims, answers(claims, _cells(8)))
    # over_capacity: the A/B claim's 66 a side less 16 held, 25 a cell: 2 batches of 20; sequential: 299 (the 1 %
    # claim) less 16 held, over 2 prompts
    assert overrides == ["protocol.phases.over_capacity.batches=2", "protocol.phases.sequential.repeats=142"]
    claims.max_n = 40
    assert sizing(typed, claims, answers(claims, _cells(8))) == ["protocol.phases.sequential.repeats=12"]


def test_the_page_says_the_verdict_first_and_each_power(tmp_path: Path) -> None:
    claims = load_text(GOOD)
    pages = write(answers(claims, _cells(20)), claims, [Path("run")], tmp_path)
    text = pages.markdown.read_text()
    assert text.splitlines()[2] == "**1 of 8 claims contradicted, 6 replicated, 1 inconclusive.**"
    assert "| on never diverges | divergence rate <= 0 | CONTRADICTED | 8 of 40 |" in text
    assert "n = 299 would settle it" in text and text.count("Power at n =") == 8
    assert "<strong>1 of 8 claims contradicted" in pages.html.read_text()
    saved = json.loads(pages.json.read_text())
    assert [c["verdict"] for c in saved["claims"]].count("replicated") == 6


def load_text(text: str) -> ClaimsConfig:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        return load(_file(Path(folder), text))


@pytest.mark.parametrize("path", sorted((config.CONF_DIR / "claims").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_claims_file_names_cells_of_its_study(path: Path) -> None:
    """The examples a user runs: each loads, and each claim's arms and phases are its study's (sizing refuses
    any other), so `orchestrator claims FILE` starts the run it sizes."""
    claims = load(path)
    assert claims.study is not None
    typed = config.to_typed(config.compose([f"study={claims.study}"]))
    empty = Cells([], [], [])
    assert sizing(typed, claims, answers_on_nothing(claims, empty))  # nothing held: every claim lacks its n


def answers_on_nothing(claims: ClaimsConfig, empty: Cells) -> list[rates.ClaimResult]:
    from orchestrator.sweep.claims import _answer

    return [_answer(claim, claims, empty) for claim in claims.claims]


def test_an_ab_claim_across_phases_sizes_both() -> None:
    """Concurrent against sequential in one arm (the seed's batch-shape question): A is the sequential phase."""
    claims = load_text("claims:\n  - {name: shape, kind: ab_difference, arm: variant, phase: over_capacity, "
                       "baseline_phase: sequential, at_least: 0.1}")
    [shape] = answers(claims, _cells(20))
    assert (shape.verdict, shape.baseline_k, shape.baseline_n, shape.k, shape.n) == ("replicated", 0, 40, 8, 40)
    typed = config.to_typed(config.compose(["study=batch_invariance"]))
    # 66 a side: A (sequential, 8 a cell in the study) lacks 26, 13 a cell; B's 20 a cell already give them
    assert sizing(typed, claims, [shape]) == ["protocol.phases.sequential.repeats=13"]


def test_a_claim_on_a_prompt_the_study_lacks_is_refused_before_it_runs() -> None:
    typed = config.to_typed(config.compose(["study=batch_invariance"]))
    claims = load_text("claims:\n  - {name: a, kind: no_crash, arm: variant, prompt: capitol}")
    with pytest.raises(ConfigError, match=r"claim 'a': prompt='capitol' names nothing that exists\. Did you mean "
                                          r"'capital'"):
        sizing(typed, claims, answers_on_nothing(claims, Cells([], [], [])))


def test_a_run_dir_without_reports_is_read_from_its_record(tmp_path: Path) -> None:
    """A run dir with no report.json (an imported one, an interrupted one): its cells re-made from the record, the
    same verdicts as the page made beside it (docs/probe-results/claims-2026-12-06)."""
    import shutil

    committed = config.CONF_DIR.parent / "docs" / "probe-results" / "claims-2026-12-06"
    run_dir = tmp_path / "run"
    shutil.copytree(committed / "run-1", run_dir)
    for name in ("report.json", "report.md", "report.html"):
        (run_dir / name).unlink()
    claims = load(config.CONF_DIR / "claims" / "reference.yaml")
    again = {r.name: (r.verdict, r.k, r.n) for r in answers(claims, Cells.read([run_dir]))}
    page = json.loads((committed / "claims.json").read_text())["claims"]
    assert again == {c["name"]: (c["verdict"], c["k"], c["n"]) for c in page}
    assert not (run_dir / "report.json").exists()  # nothing written into it
