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
from orchestrator.run.send.prompt_length import exact
from orchestrator.run.wire.client import CompletionClient
from orchestrator.sweep.onset import read_job, search
from orchestrator.sweep.onset_config import AxisConf, OnsetSettings, TargetConf, grid, problems, resolve_outcome
from orchestrator.sweep.onset_run import check, expectation
from orchestrator.sweep.onset_state import read, resumed, write


def settings(**kw: object) -> OnsetSettings:
    s = OnsetSettings(axis=AxisConf(key="prompts.prompts.p.length_tokens", low=64, high=512),
                      target=TargetConf(arm="a", prompt="p", phase="sequential", outcome="divergent"), width=8,
                      max_jobs=20)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class Fake:
    """Jobs whose count is a function of the axis value; each writes a report.json and .hydra/config.yaml as a run
    would. `two_answers`: k requests of n take the other answer, so the modal count is min(k, n - k) and the count
    against the reference answer k; else both are k."""

    def __init__(self, sweep_dir: Path, rate: object, fails: object = lambda value: False, n: int = 6,
                 two_answers: bool = False, interrupt_at: int | None = None) -> None:
        self.dir, self.rate, self.values, self.fails = sweep_dir, rate, [], fails  # type: ignore[var-annotated]
        self.n, self.two_answers, self.interrupt_at = n, two_answers, interrupt_at

    def __call__(self, batch: list[list[str]], first: int) -> list[tuple[int, Path]]:
        out = []
        for i, job in enumerate(batch):
            key, value_text = job[-1].split("=")
            run = self.dir / str(first + i)
            run.mkdir()
            if first + i == self.interrupt_at:  # Ctrl-C in this job: its dir made, no report
                raise KeyboardInterrupt
            value = float(value_text)
            self.values.append(value)
            k = self.rate(value)  # type: ignore[operator]
            cell = {"arm": "a", "prompt_id": "p", "phase": "sequential", "n": self.n, "errors": 0,
                    "divergent": min(k, self.n - k) if self.two_answers else k, "off_reference": k,
                    "off_reference_of": self.n, "first_divergent_position": 0 if k else None, "top1_flips": k}
            other = {**cell, "prompt_id": "q", "divergent": self.n}  # not a target cell: never counted
            (run / "report.json").write_text(json.dumps({"cells": [cell, other], "cold": [{}]}))
            max_tokens = int(value) if key == "protocol.request.max_tokens" else 4
            (run / ".hydra").mkdir()
            (run / ".hydra" / "config.yaml").write_text(f"protocol:\n  request:\n    max_tokens: {max_tokens}\n")
            out.append((4 if self.fails(value) else 0, run))  # type: ignore[operator]
        return out


def run(tmp_path: Path, s: OnsetSettings, rate: object) -> tuple[dict, Fake]:  # type: ignore[type-arg]
    fake = Fake(tmp_path, rate)
    state = search(s, resumed(tmp_path, s, [], grid(s.axis)), tmp_path, fake, lambda st: write(tmp_path, st))
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
                   fake, lambda st: write(tmp_path, st))
    result = state.configurations[0].result
    assert result is not None and result["outcome"] != "no onset in range", (result["line"], fake.values)
    assert "3 jobs failed and are not counted" in result["line"]
    assert "job(s)" not in result["line"] and ": status 4" in result["line"]


def test_no_onset_in_range_says_its_bound(tmp_path: Path) -> None:
    result, _ = run(tmp_path, settings(), lambda v: 0)
    assert result["outcome"] == "no onset in range" and result["line"].startswith("no onset in [64, 512] at 95 %")
    assert "divergence at most" in result["line"]


def test_islands_are_not_monotone(tmp_path: Path) -> None:
    result, _ = run(tmp_path, settings(round_size=4, max_jobs=24), lambda v: 6 if 200 <= v <= 380 else 0)
    assert result["outcome"] == "not monotone" and "Bayes factor" in result["line"]
    assert (tmp_path / "onset.json").is_file()


def test_resume_continues_the_recorded_search(tmp_path: Path) -> None:
    """Stopped by its budget after 3 jobs, then resumed with a larger one: the recorded jobs count, new ones are
    numbered after them, and the search goes exactly as one that was never stopped."""
    step = lambda v: 5 if v > 256 else 0  # noqa: E731
    (tmp_path / "whole").mkdir()
    whole, uninterrupted = run(tmp_path / "whole", settings(max_jobs=20), step)
    first, fake = run(tmp_path, settings(max_jobs=3), step)
    assert first["stop"] == "budget (jobs)" and len(fake.values) == 3
    more = settings(max_jobs=20)
    state = resumed(tmp_path, more, [], grid(more.axis))
    assert [j.job for j in state.configurations[0].jobs] == [0, 1, 2]
    fake2 = Fake(tmp_path, step)
    state = search(more, state, tmp_path, fake2, lambda st: write(tmp_path, st))
    jobs = state.configurations[0].jobs
    assert [j.job for j in jobs] == list(range(len(jobs))) and len(jobs) == 3 + len(fake2.values)
    assert fake.values + fake2.values == uninterrupted.values  # no point measured twice, none skipped
    assert state.configurations[0].result == whole
    with pytest.raises(ConfigError, match="records another search"):
        resumed(tmp_path, settings(axis=AxisConf(key="x", low=1, high=9)), [], [1.0, 9.0])


def test_a_search_interrupted_in_a_round_resumes_to_the_uninterrupted_answer(tmp_path: Path) -> None:
    """Ctrl-C in the fifth job: onset.json keeps the four rounds before; the same search resumed numbers its jobs
    after the interrupted job's dir and gives the answer of a search never interrupted."""
    step = lambda v: 5 if v > 300 else 0  # noqa: E731
    (tmp_path / "whole").mkdir()
    whole, uninterrupted = run(tmp_path / "whole", settings(), step)
    cut = Fake(tmp_path, step, interrupt_at=4)
    with pytest.raises(KeyboardInterrupt):
        search(settings(), resumed(tmp_path, settings(), [], grid(settings().axis)), tmp_path, cut,
               lambda st: write(tmp_path, st))
    cut_state = read(tmp_path)
    assert cut_state is not None and len(cut_state.configurations[0].jobs) == 4
    assert cut_state.interrupted and cut_state.abandoned == ["4"]  # the report says so (test_onset_report.py)
    rest = Fake(tmp_path, step)
    state = search(settings(), resumed(tmp_path, settings(), [], grid(settings().axis)), tmp_path, rest,
                   lambda st: write(tmp_path, st))
    jobs = state.configurations[0].jobs
    assert [j.job for j in jobs] == [0, 1, 2, 3, *range(5, 5 + len(rest.values))]  # 4: the interrupted job's dir
    assert cut.values + rest.values == uninterrupted.values and state.configurations[0].result == whole
    assert not state.interrupted and state.abandoned == ["4"]  # resumed: no longer provisional; 4 stays named


def test_an_interval_past_both_ends_says_no_point_lies_outside_it(tmp_path: Path) -> None:
    """0/3 at 64 and 3/3 at 288: at 95 % the interval holds both points (a single rate is not excluded), so no
    measured point lies below or above it; the answer says that, not "no requests"."""
    s = settings(width=16, max_jobs=2)
    fake = Fake(tmp_path, lambda v: 3 if v > 200 else 0, n=3)
    line = search(s, resumed(tmp_path, s, [], grid(s.axis)), tmp_path, fake,
                  lambda st: None).configurations[0].result["line"]  # type: ignore[index]
    assert sorted(fake.values) == [64.0, 288.0]
    assert line == ("onset in [below 64, above 512] at 95 %, reaching past the range: no point measured below the "
                    "interval, no point measured above the interval")
    s.max_jobs = 3  # a third point, 175: the interval ends at 288, above it 3/3
    fake = Fake(tmp_path, lambda v: 3 if v > 200 else 0, n=3)
    line = search(s, resumed(tmp_path, s, [], grid(s.axis)), tmp_path, fake,
                  lambda st: None).configurations[0].result["line"]  # type: ignore[index]
    assert line.endswith(": no point measured below the interval, rate above 3/3 (0.29-1.00)"), line


def test_top1_flips_are_counted_over_each_jobs_own_max_tokens(tmp_path: Path) -> None:
    """An axis that changes max_tokens: each job's (request, position) pairs are (n - 1) x its own max_tokens."""
    s = settings(axis=AxisConf(key="protocol.request.max_tokens", low=1, high=64),
                 target=TargetConf(arm="a", prompt="p", phase="sequential", outcome="top1_flips"), max_jobs=4)
    search(s, state := resumed(tmp_path, s, [], grid(s.axis)), tmp_path, Fake(tmp_path, lambda v: 1),
           lambda st: None)
    jobs = state.configurations[0].jobs
    assert len(jobs) == 4 and [j.n for j in jobs] == [5 * int(j.value) for j in jobs]


def test_a_rate_against_the_modal_answer_that_falls_again_is_one_onset(tmp_path: Path) -> None:
    """Batches of 90 where 30 take the other answer from 256 on and 75 from 381 on: against the modal answer the
    rate goes 0 -> 0.33 -> 0.17 (the modal answer changed: this search said "not monotone" before), against the
    reference answer 0 -> 0.33 -> 0.83. Neither returns to the base rate: both find the onset at 256."""
    share = lambda v: 0 if v < 256 else 30 if v <= 380 else 75  # noqa: E731
    for outcome in ("divergent", "reference"):
        (tmp_path / outcome).mkdir()
        s = settings(target=TargetConf(arm="a", prompt="p", phase="sequential", outcome=outcome), round_size=4,
                     max_jobs=12)
        fake = Fake(tmp_path / outcome, share, n=90, two_answers=True)
        state = search(s, resumed(tmp_path / outcome, s, [], grid(s.axis)), tmp_path / outcome, fake,
                       lambda st: None)
        result = state.configurations[0].result
        assert result is not None and result["outcome"] == "onset", (outcome, result["line"])
        a, b = result["interval"]
        assert a < 256 <= b, result["line"]


def test_the_outcome_is_the_reference_answer_where_every_target_cell_has_one() -> None:
    def outcome(kinds: list[str], prompts: list[str], prompt: str | None = None, given: str | None = None) -> str:
        s = settings(target=TargetConf(prompt=prompt, outcome=given))
        resolve_outcome(s, kinds, prompts)
        assert s.target.outcome is not None
        return s.target.outcome

    assert outcome(["concurrent", "sequential"], ["p", "q"]) == "reference"  # the first sequential request
    assert outcome(["concurrent"], ["p"]) == "reference"  # the cold request, sent for the first prompt
    assert outcome(["concurrent"], ["p", "q"], prompt="q") == "divergent"  # q has no cold request
    assert outcome(["concurrent"], ["p", "q"], given="top1_flips") == "top1_flips"
    with pytest.raises(ConfigError, match=r"target\.outcome=reference: a target cell has no reference answer"):
        outcome(["concurrent"], ["p", "q"], given="reference")


def test_read_job_pools_the_target_cells_only(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"cells": [
        {"arm": "a", "prompt_id": "p", "phase": "s", "n": 6, "errors": 1, "divergent": 2, "top1_flips": 7,
         "first_divergent_position": 3},
        {"arm": "b", "prompt_id": "p", "phase": "s", "n": 6, "errors": 0, "divergent": 5, "top1_flips": 1}],
        "cold": [{}, {}]}))
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("protocol:\n  request:\n    max_tokens: 4\n")
    got = read_job(tmp_path, TargetConf(arm="a", outcome="divergent"))
    assert (got.k, got.n, got.requests, got.first_divergent_position) == (2, 6, 15, 3)
    flips = read_job(tmp_path, TargetConf(arm="a", outcome="top1_flips"))
    assert (flips.k, flips.n) == (7, 20)  # (6 - 1) requests x 4 positions
    assert read_job(tmp_path / "nowhere", TargetConf(outcome="divergent")).k is None
    unreferenced = read_job(tmp_path, TargetConf(arm="a", outcome="reference"))
    assert unreferenced.k is None and "no reference answer" in unreferenced.note and "a/p/s" in unreferenced.note


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
           lambda st: None)
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
