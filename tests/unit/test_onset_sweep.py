"""The onset search (sweep/onset*.py) with a stand-in launcher that writes each job's report.json: its stop
rules, onset.json and resume, the answers; the checks before any job; length_tokens at run time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from orchestrator.engines import profile_for
from orchestrator.errors import ConfigError
from orchestrator.run.client import CompletionClient
from orchestrator.run.prompt_length import exact
from orchestrator.sweep.onset import read_job, search
from orchestrator.sweep.onset_config import AxisConf, OnsetSettings, TargetConf, grid, problems
from orchestrator.sweep.onset_run import check, expectation
from orchestrator.sweep.onset_state import read, resumed, write


def settings(**kw: object) -> OnsetSettings:
    s = OnsetSettings(axis=AxisConf(key="prompts.prompts.p.length_tokens", low=64, high=512),
                      target=TargetConf(arm="a", prompt="p", phase="sequential"), width=8, max_jobs=20)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class Fake:
    """Jobs whose divergent count is a function of the axis value; each writes a report.json as a run would."""

    def __init__(self, sweep_dir: Path, rate: object, fails: object = lambda value: False) -> None:
        self.dir, self.rate, self.values, self.fails = sweep_dir, rate, [], fails  # type: ignore[var-annotated]

    def __call__(self, batch: list[list[str]], first: int) -> list[tuple[int, Path]]:
        out = []
        for i, job in enumerate(batch):
            value = float(job[-1].split("=")[1])
            self.values.append(value)
            k = self.rate(value)  # type: ignore[operator]
            run = self.dir / str(first + i)
            run.mkdir()
            cell = {"arm": "a", "prompt_id": "p", "phase": "sequential", "n": 6, "errors": 0, "divergent": k,
                    "first_divergent_position": 0 if k else None, "top1_flips": k}
            other = {**cell, "prompt_id": "q", "divergent": 6}  # not a target cell: never counted
            (run / "report.json").write_text(json.dumps({"cells": [cell, other], "cold": [{}]}))
            out.append((4 if self.fails(value) else 0, run))  # type: ignore[operator]
        return out


def run(tmp_path: Path, s: OnsetSettings, rate: object) -> tuple[dict, Fake]:  # type: ignore[type-arg]
    fake = Fake(tmp_path, rate)
    state = search(s, resumed(tmp_path, s, [], grid(s.axis)), tmp_path, fake, lambda st: write(tmp_path, st), 4)
    result = state.configurations[0].result
    assert result is not None
    return result, fake


def test_a_step_is_bracketed_within_the_width(tmp_path: Path) -> None:
    result, fake = run(tmp_path, settings(), lambda v: 5 if v > 256 else 0)
    a, b = result["interval"]
    assert result["outcome"] == "onset" and result["stop"] == "width"
    assert a <= 256 < b and b - a <= 8
    assert len(fake.values) <= 12  # bisection's share of 449 points, not a grid
    assert result["below"]["k"] == 0 and result["above"]["k"] == 5 * sum(v > 256 for v in fake.values)


def test_rounds_of_several_points_for_parallel_launchers(tmp_path: Path) -> None:
    result, fake = run(tmp_path, settings(round_size=3), lambda v: 5 if v > 300 else 0)
    assert result["outcome"] == "onset" and len(fake.values) % 3 == 0
    assert read(tmp_path) is not None and [j.job for j in read(tmp_path).configurations[0].jobs] == list(  # type: ignore[union-attr]
        range(len(fake.values)))


def test_budget_of_jobs_and_of_requests_stop_the_search(tmp_path: Path) -> None:
    step = lambda v: 5 if v > 256 else 0  # noqa: E731
    (tmp_path / "jobs").mkdir()
    result, fake = run(tmp_path / "jobs", settings(max_jobs=3), step)
    assert result["stop"] == "budget (jobs)" and len(fake.values) == 3
    (tmp_path / "requests").mkdir()
    result, fake = run(tmp_path / "requests", settings(max_requests=20), step)
    assert result["stop"] == "budget (requests)" and len(fake.values) == 2  # 13 requests a job: 2 cells + cold


def test_a_failed_jobs_counts_are_not_evidence(tmp_path: Path) -> None:
    """An engine that died mid-job (status 4) left a cell of the requests before it died, all alike: its 0 of n
    must not read as "no divergence there". Seen with continuous batching on a CPU at a batch of 64."""
    fake = Fake(tmp_path, lambda v: 0, fails=lambda v: v > 256)  # it dies above 256, before any divergence
    state = search(settings(max_jobs=4), resumed(tmp_path, settings(max_jobs=4), [], grid(settings().axis)), tmp_path,
                   fake, lambda st: write(tmp_path, st), 4)
    result = state.configurations[0].result
    assert result is not None and result["outcome"] != "no onset in range", (result["line"], fake.values)
    assert "job(s) failed and are not counted" in result["line"] and ": status 4" in result["line"]


def test_no_onset_in_range_says_its_bound(tmp_path: Path) -> None:
    result, _ = run(tmp_path, settings(), lambda v: 0)
    assert result["outcome"] == "no onset in range" and result["line"].startswith("no onset in [64, 512] at 95 %")
    assert "divergence at most" in result["line"]


def test_islands_are_not_monotone(tmp_path: Path) -> None:
    result, _ = run(tmp_path, settings(round_size=4, max_jobs=24), lambda v: 6 if 200 <= v <= 380 else 0)
    assert result["outcome"] == "not monotone" and "Bayes factor" in result["line"]
    assert (tmp_path / "onset.json").is_file()


def test_resume_continues_the_recorded_search(tmp_path: Path) -> None:
    step = lambda v: 5 if v > 256 else 0  # noqa: E731
    first, fake = run(tmp_path, settings(max_jobs=3), step)
    assert first["stop"] == "budget (jobs)"
    more = settings(max_jobs=20)
    state = resumed(tmp_path, more, [], grid(more.axis))
    assert len(state.configurations[0].jobs) == 3 and state.next_job == 3
    fake2 = Fake(tmp_path, step)
    state = search(more, state, tmp_path, fake2, lambda st: write(tmp_path, st), 4)
    assert state.configurations[0].result["outcome"] == "onset"  # type: ignore[index]
    assert set(fake.values).isdisjoint(fake2.values) or len(fake2.values) > 0
    with pytest.raises(ConfigError, match="records another search"):
        resumed(tmp_path, settings(axis=AxisConf(key="x", low=1, high=9)), [], [1.0, 9.0])


def test_read_job_pools_the_target_cells_only(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"cells": [
        {"arm": "a", "prompt_id": "p", "phase": "s", "n": 6, "errors": 1, "divergent": 2, "top1_flips": 7,
         "first_divergent_position": 3},
        {"arm": "b", "prompt_id": "p", "phase": "s", "n": 6, "errors": 0, "divergent": 5, "top1_flips": 1}],
        "cold": [{}, {}]}))
    got = read_job(tmp_path, TargetConf(arm="a"), 4)
    assert (got.k, got.n, got.requests, got.first_divergent_position) == (2, 6, 15, 3)
    flips = read_job(tmp_path, TargetConf(arm="a", outcome="top1_flips"), 4)
    assert (flips.k, flips.n) == (7, 20)  # (6 - 1) requests x 4 positions
    assert read_job(tmp_path / "nowhere", TargetConf(), 4).k is None


@pytest.mark.parametrize(("axis", "says"), [
    (AxisConf(key="k", low=10, high=10), "is empty"),
    (AxisConf(key="k", low=0, high=10, scale="log"), "log axis needs low > 0"),
    (AxisConf(key="", low=1, high=10), "axis.key is not set"),
    (AxisConf(key="k", low=1.5, high=10), "whole bounds"),
])
def test_bad_axis_settings_are_named(axis: AxisConf, says: str) -> None:
    assert any(says in p for p in problems(settings(axis=axis)))


@pytest.mark.parametrize(("scale", "width", "says"), [
    ("log", 0.8, "there it is a ratio"), ("log", 1.0, "use a number > 1"), ("linear", 0.0, "positive width"),
    ("log", 1.25, None), ("linear", 0.5, None),
])
def test_width_is_a_ratio_on_a_log_axis(scale: str, width: float, says: str | None) -> None:
    found = problems(settings(axis=AxisConf(key="k", low=1, high=64, scale=scale), width=width))
    assert (found == []) if says is None else (len(found) == 1 and says in found[0])


def test_a_log_axis_is_searched_in_log_and_its_width_is_a_ratio(tmp_path: Path) -> None:
    s = settings(axis=AxisConf(key="protocol.phases.concurrent.repeats", low=1, high=64, scale="log"),
                 width=1.25, round_size=3)
    result, fake = run(tmp_path, s, lambda v: 5 if v > 10 else 0)
    a, b = result["interval"]
    assert result["outcome"] == "onset" and result["stop"] == "width"
    assert a <= 10 < b and result["width"] == pytest.approx(b / a) and b / a <= 1.25
    assert fake.values[:3] == [1, 8, 64] and 5 <= fake.values[3] <= 24  # spread in log, then near 1-64's middle


def test_an_expected_answer_passes_and_another_is_a_failed_gate(tmp_path: Path) -> None:
    s = settings()
    search(s, state := resumed(tmp_path, s, [], grid(s.axis)), tmp_path, Fake(tmp_path, lambda v: 0),
           lambda st: None, 4)
    assert expectation(state, None).status == 0 and expectation(state, "none").status == 0
    wrong = expectation(state, "onset")
    assert wrong.status == 3 and wrong.notes == [
        "expected onset (hydra.sweeper.expect=onset), found no onset in range"]
    assert any("hydra.sweeper.expect=maybe" in p for p in problems(settings(expect="maybe")))


def test_grid_of_a_log_axis_is_ascending_and_unique() -> None:
    g = grid(AxisConf(key="k", low=1, high=64, scale="log", points=50))
    assert g[0] == 1 and g[-1] == 64 and g == sorted(set(g))
    assert len(grid(AxisConf(key="k", low=64, high=512))) == 449


def _composed(*overrides: str) -> object:
    from orchestrator import config

    return config.compose(["study=onset_indexer_budget", *overrides])


@pytest.mark.parametrize(("overrides", "says"), [
    (["hydra.sweeper.axis.low=5000"], "is empty"),
    (["hydra.sweeper.axis.key=arms.random_topk.image"], "not a number"),
    (["hydra.sweeper.target.prompt=nope"], "no such prompt"),
    (["hydra.sweeper.target.phase=concurrent"], "no such phase"),
])
def test_bad_onset_configs_are_refused_before_any_job(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        check(_composed(*overrides), ["study=onset_indexer_budget", *overrides], 1, [])  # type: ignore[arg-type]


def test_swept_overrides_are_refused_with_the_onset_sweeper() -> None:
    with pytest.raises(ConfigError, match=r"hydra\.sweeper\.per"):
        check(_composed(), ["study=onset_indexer_budget"], 2, [])  # type: ignore[arg-type]


def test_length_tokens_sends_exactly_the_first_n_token_ids() -> None:
    def tokenize(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"tokens": list(json.loads(request.content)["prompt"].encode())})

    async def go(n: int) -> dict[str, str | list[int]]:
        client = CompletionClient("http://arm", 5, transport=httpx.MockTransport(tokenize))
        try:
            return await exact(client, "m", {"p": "abcdefgh", "q": "kept"}, {"p": n}, profile_for("reference"), "a")
        finally:
            await client.aclose()

    assert asyncio.run(go(5)) == {"p": list(b"abcde"), "q": "kept"}
    with pytest.raises(ConfigError, match="fewer than length_tokens=9"):
        asyncio.run(go(9))
