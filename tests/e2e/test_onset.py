"""The onset sweeper on the reference engine: its random top-k tie-break diverges once the prompt exceeds
the indexer budget. With the budget at 256 and exact prompt lengths 64-512, the search must bracket 256
between two measured points 16 tokens apart at most, in a few jobs, and say so on one line (exit 0, as
expected); a search that expects another answer exits 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def test_onset_brackets_a_small_indexer_budget(tmp_path: Path) -> None:
    result = orchestrator("run", "study=onset_indexer_budget", "arms.random_topk.engine_args.indexer-budget=256",
                          "hydra.sweeper.axis.low=64", "hydra.sweeper.axis.high=512", "hydra.sweeper.width=16",
                          "hydra.sweeper.budget_tokens=256", "hydra.sweeper.max_jobs=10", "hydra.sweeper.expect=onset",
                          "protocol.phases.sequential.repeats=4", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "onset.json").read_text())
    [config] = state["configurations"]
    a, b = config["result"]["interval"]
    assert config["result"]["outcome"] == "onset" and a <= 256 < b and b - a <= 16, config["result"]["line"]
    assert all(j["prompt_tokens"] == j["value"] for j in config["jobs"])  # exactly N tokens, the server agrees
    assert "onset in [" in result.stdout and "onset.json" in result.stdout
    report = (tmp_path / "report.md").read_text()
    assert f"({config['jobs'][0]['dir']}/report.md)" in report and "<svg" in (tmp_path / "report.html").read_text()


def test_a_target_cell_the_study_lacks_is_refused_before_any_job(tmp_path: Path) -> None:
    result = orchestrator("run", "study=onset_indexer_budget", "hydra.sweeper.target.arm=stable",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 2 and "no such arm" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "sweep").exists()


def test_an_answer_other_than_the_expected_one_exits_3(tmp_path: Path) -> None:
    result = orchestrator("run", "study=onset_indexer_budget", "arms.random_topk.engine_args.indexer-budget=256",
                          "hydra.sweeper.axis.low=64", "hydra.sweeper.axis.high=512", "hydra.sweeper.max_jobs=2",
                          "hydra.sweeper.expect=none", "protocol.phases.sequential.repeats=4",
                          f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 3, result.stderr[-3000:]
    assert "expected no onset in range (hydra.sweeper.expect=none), found " in result.stderr
    assert len(json.loads((tmp_path / "onset.json").read_text())["configurations"][0]["jobs"]) == 2


def test_one_onset_per_configuration_side_by_side_in_rounds(tmp_path: Path) -> None:
    """`per`: budgets 384 and 256, one onset each, in rounds of 2 jobs (one launch each, as a parallel launcher
    gets them): the report answers "is the threshold shared?" with both intervals."""
    result = orchestrator("run", "study=onset_indexer_budget", "hydra.sweeper.round_size=2",
                          "hydra.sweeper.axis.low=64", "hydra.sweeper.axis.high=512",
                          "hydra.sweeper.width=64", "hydra.sweeper.max_jobs=6", "protocol.phases.sequential.repeats=4",
                          "hydra.sweeper.per=['arms.random_topk.engine_args.indexer-budget=384',"
                          "'arms.random_topk.engine_args.indexer-budget=256']", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    configs = json.loads((tmp_path / "onset.json").read_text())["configurations"]
    assert [c["per"] for c in configs] == [["arms.random_topk.engine_args.indexer-budget=384"],
                                           ["arms.random_topk.engine_args.indexer-budget=256"]]
    for config, budget in zip(configs, (384, 256), strict=True):
        a, b = config["result"]["interval"]
        assert a is not None and b is not None and a <= budget < b, config["result"]["line"]
        assert len(config["jobs"]) <= 6
    report = (tmp_path / "report.md").read_text()
    assert "indexer-budget=384" in report and "indexer-budget=256" in report
