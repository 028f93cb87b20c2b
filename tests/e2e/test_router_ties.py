"""Ground truth for the router's top-k under ties (issue 48 item 3): the reference engine's router ties at the
k-th expert in a share of its rows (--router-tie-share); with the random tie-break the orchestrator finds
divergence, with the stable one (the seed's stable-sort fix) or without ties it finds none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_mechanisms import distinct, run_study

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def test_router_ties_diverge_only_with_the_random_tie_break(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=router_ties")
    for prompt in ("capital", "count"):
        assert distinct(report, "random_ties", prompt) > 1
        assert distinct(report, "stable_ties", prompt) == 1
        assert distinct(report, "random_no_ties", prompt) == 1
    assert report["facts"]["random_ties"]["router_tie_share"] == "0.2"
    assert report["facts"]["random_no_ties"]["router_tie_share"] == "0"
    assert report["facts"]["stable_ties"]["topk_tiebreak"] == "stable"
