"""`orchestrator claims`'s onset kind: "diverges from N on" against an onset search's dir (onset.json): replicated
inside the bracket the search settled, contradicted outside it, inconclusive where the search did not settle. On
the committed search docs/probe-results/cpu-2026-12-06/onset_indexer_budget (onset after 2028, by 2052) and on
copies of it made to say what an unsettled search says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator import config
from orchestrator.errors import ConfigError
from orchestrator.report.claims import write
from orchestrator.sweep.claims import Cells, answers
from tests.e2e.test_claims import claims as claims_verb
from tests.unit.test_claims import load_text

SEARCH = config.CONF_DIR.parent / "docs" / "probe-results" / "cpu-2026-12-06" / "onset_indexer_budget"


def _claim(onset: float, search: Path = SEARCH, more: str = "") -> str:
    return f"claims:\n  - {{name: o, kind: onset, arm: random_topk, onset: {onset}, search: '{search}'{more}}}"


def _answer(onset: float, search: Path = SEARCH, more: str = "") -> Any:
    [result] = answers(load_text(_claim(onset, search, more)), Cells([], [], []))
    return result


@pytest.mark.parametrize(("onset", "verdict"), [
    (2048, "replicated"), (2052, "replicated"),  # (2028, 2052]: after 2028, at or before 2052
    (2028, "contradicted"), (1500, "contradicted"), (3000, "contradicted"),
])
def test_the_claimed_onset_against_the_searchs_bracket(onset: float, verdict: str) -> None:
    result = _answer(onset)
    assert (result.verdict, result.lower, result.upper) == (verdict, 2028, 2052)
    assert result.notes[0].startswith("the search: onset in [2028, 2052] at 95 %")


def _edited(tmp_path: Path, **result: Any) -> Path:
    """A copy of the committed search whose result says something else."""
    folder = tmp_path / "search"
    shutil.copytree(SEARCH, folder)
    state = json.loads((folder / "onset.json").read_text())
    state["configurations"][0]["result"].update(result)
    (folder / "onset.json").write_text(json.dumps(state))
    return folder


@pytest.mark.parametrize(("result", "onset", "verdict"), [
    ({"outcome": "not monotone", "interval": None}, 2048, "inconclusive"),
    ({"outcome": "undecided", "interval": [None, 2052]}, 2048, "inconclusive"),  # reaching below the range
    ({"outcome": "undecided", "interval": [None, 2052]}, 3000, "contradicted"),  # past its finite end
    ({"outcome": "no onset in range", "interval": None, "below": {"k": 0}}, 2048, "contradicted"),
    ({"outcome": "no onset in range", "interval": None, "below": {"k": 0}}, 5000, "inconclusive"),
    ({"outcome": "no onset in range", "interval": None, "below": None, "above": {"k": 9}}, 2048, "contradicted"),
])
def test_a_search_that_did_not_settle_settles_only_what_it_rules_out(tmp_path: Path, result: dict[str, Any],
                                                                     onset: float, verdict: str) -> None:
    found = _answer(onset, _edited(tmp_path, **result))
    assert found.verdict == verdict
    if verdict == "inconclusive":
        assert any("run the search further" in note for note in found.notes)


def test_an_interrupted_search_cannot_replicate(tmp_path: Path) -> None:
    folder = _edited(tmp_path)
    state = json.loads((folder / "onset.json").read_text())
    (folder / "onset.json").write_text(json.dumps({**state, "interrupted": True}))
    result = _answer(2048, folder)
    assert result.verdict == "inconclusive" and "the search was interrupted: its answer is provisional" in result.notes


def test_a_claim_on_another_search_or_arm_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"claims\[0\]\.search='.*nowhere': no onset\.json there; name the "
                                          r"hydra\.sweep\.dir of an `orchestrator onset` search"):
        _answer(2048, tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"claims\[0\]\.arm='other' names nothing that exists"):
        _answer_arm("other")
    with pytest.raises(ConfigError, match=r"claims\[0\]\.per='x=1' names nothing that exists"):
        _answer(2048, SEARCH, ", per: 'x=1'")
    with pytest.raises(ConfigError, match=r"an onset claim takes `onset: N`"):
        load_text("claims:\n  - {name: o, kind: onset, arm: a, onset: 3}")
    with pytest.raises(ConfigError, match=r"phase is other kinds'"):
        load_text(_claim(3, more=", phase: sequential"))


def _answer_arm(arm: str) -> Any:
    [result] = answers(load_text(_claim(2048).replace("arm: random_topk", f"arm: {arm}")), Cells([], [], []))
    return result


def test_the_page_and_the_command_from_the_users_side(tmp_path: Path) -> None:
    claims = load_text(_claim(1500))
    text = write(answers(claims, Cells([], [], [])), claims, [], tmp_path / "page").markdown.read_text()
    assert ("| o | diverges from 1500 on | CONTRADICTED | 8 points, 56 requests | after 2028, at or before 2052 |"
            in text)
    (tmp_path / "c.yaml").write_text(_claim(1500))  # nothing else named: the search is the evidence
    result = claims_verb(tmp_path, "c.yaml")  # from the user's folder
    assert result.returncode == 3, result.stderr
    assert "a bracket that excludes the claim (diverges from 1500 on)" in result.stdout
