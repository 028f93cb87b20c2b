"""The onset sweeper on the reference engine: its random top-k tie-break diverges once the prompt exceeds
the indexer budget. With the budget at 256 and exact prompt lengths 64-512, the search must bracket 256
between two measured points 16 tokens apart at most, in a few jobs, and say so on one line (exit 0, as
expected); a search that expects another answer exits 3."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, interrupt, orchestrator

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
                          "hydra.sweeper.width=64", "hydra.sweeper.max_jobs=10", "protocol.phases.sequential.repeats=4",
                          "hydra.sweeper.per=['arms.random_topk.engine_args.indexer-budget=384',"
                          "'arms.random_topk.engine_args.indexer-budget=256']", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    configs = json.loads((tmp_path / "onset.json").read_text())["configurations"]
    assert [c["per"] for c in configs] == [["arms.random_topk.engine_args.indexer-budget=384"],
                                           ["arms.random_topk.engine_args.indexer-budget=256"]]
    intervals = []
    for config, budget in zip(configs, (384, 256), strict=True):
        result_ = config["result"]
        a, b = result_["interval"]
        assert result_["outcome"] == "onset" and result_["stop"] == "width", result_["line"]
        assert a <= budget < b and b - a <= 64, result_["line"]  # the width asked for, not the range
        assert len(config["jobs"]) < 10 and len(config["jobs"]) % 2 == 0  # whole rounds of 2, before the budget
        intervals.append((a, b))
    (a384, _), (_, b256) = intervals
    assert b256 <= a384  # two onsets, the smaller budget's wholly below the larger's
    # every round launched both configurations' 2 points together: one launch of 4 jobs per round
    rounds = max(len(c["jobs"]) for c in configs) // 2
    launches = [line for line in (result.stdout + result.stderr).splitlines() if "Launching" in line]
    assert len(launches) == rounds and all("Launching 4 jobs" in line for line in launches[:min(
        len(c["jobs"]) for c in configs) // 2]), launches
    jobs = sorted(j["job"] for c in configs for j in c["jobs"])
    assert jobs == list(range(len(jobs)))
    report = (tmp_path / "report.md").read_text()
    assert "indexer-budget=384" in report and "indexer-budget=256" in report


SMALL_BUDGET = ("study=onset_indexer_budget", "arms.random_topk.engine_args.indexer-budget=256",
                "hydra.sweeper.axis.low=64", "hydra.sweeper.axis.high=512", "hydra.sweeper.width=16",
                "hydra.sweeper.budget_tokens=256", "hydra.sweeper.max_jobs=10", "protocol.phases.sequential.repeats=4")


def test_an_onset_search_interrupted_between_rounds_resumes_to_the_uninterrupted_answer(tmp_path: Path) -> None:
    """Ctrl-C once onset.json holds two rounds, then the same command again: it resumes (the recorded jobs
    count, the interrupted job's point is run again under a new number) and ends where a search never
    interrupted ends, the same points in the same order and the same interval."""
    whole = orchestrator("run", *SMALL_BUDGET, f"hydra.sweep.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    sweep = tmp_path / "cut"
    command = [sys.executable, "-m", "orchestrator", "run", *SMALL_BUDGET, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None and _jobs(sweep) < 2:
        time.sleep(0.2)
    stderr = interrupt(proc)
    assert proc.returncode == 130, stderr[-3000:]
    assert f"the same command with hydra.sweep.dir={sweep} resumes it" in stderr
    kept = _jobs(sweep)
    assert 2 <= kept < 10
    cut = json.loads((sweep / "onset.json").read_text())
    assert cut["interrupted"] and f"**Interrupted** after {kept} of 10 jobs" in (sweep / "report.md").read_text()
    assert all((sweep / d).is_dir() for d in cut["abandoned"])  # Ctrl-C between two jobs: none
    resumed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed the search in {sweep / 'onset.json'}: {kept} jobs recorded before" in resumed.stderr
    [done] = json.loads((sweep / "onset.json").read_text())["configurations"]
    [want] = json.loads((tmp_path / "whole" / "onset.json").read_text())["configurations"]
    assert [j["value"] for j in done["jobs"]] == [j["value"] for j in want["jobs"]]
    assert done["result"]["outcome"] == want["result"]["outcome"] == "onset"
    assert done["result"]["interval"] == want["result"]["interval"], (done["result"]["line"], want["result"]["line"])
    assert "nterrupted" not in (sweep / "report.md").read_text().replace("interrupted round", "")
    numbers = [j["job"] for j in done["jobs"]]
    assert numbers == sorted(set(numbers)) and all((sweep / str(n) / "report.json").is_file() for n in numbers)


def _jobs(sweep: Path) -> int:
    try:
        return sum(len(c["jobs"]) for c in json.loads((sweep / "onset.json").read_text())["configurations"])
    except (OSError, ValueError):
        return 0
