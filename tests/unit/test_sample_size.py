"""Sample size from the claim: protocol.target_bound derives each cell's requests, protocol.stop_after_divergences
ends a cell once it has shown divergence, and the bounds stay honest for that rule (docs/usage.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.analysis.compare import compare
from orchestrator.analysis.results import Cell
from orchestrator.analysis.stats import clopper_pearson, repeats_for_bound, stopped_lower_bound, upper_bound_zero
from orchestrator.analysis.stopping import StopRule
from orchestrator.config.schema import Config, PhaseKind
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.report.headline import sample_size
from orchestrator.report.markdown import rate
from orchestrator.reproduce.resume import resume_plan
from orchestrator.run.send import protocol
from orchestrator.run.study import StudyRunner
from tests.fake_engine import fake_runtime


@pytest.mark.parametrize(("bound", "n"), [(0.01, 299), (0.05, 59), (0.1, 29), (0.5, 5)])
def test_the_repeats_are_the_fewest_whose_zero_divergence_bound_meets_the_target(bound: float, n: int) -> None:
    assert repeats_for_bound(bound) == n
    assert upper_bound_zero(n) <= bound < upper_bound_zero(n - 1)


def test_target_bound_sizes_every_cell_and_overrides_the_phases_repeats() -> None:
    typed = config.to_typed(config.compose(["protocol=smoke", "protocol.target_bound=0.01"]))
    phases = protocol.cell_phases(typed.protocol)
    assert phases["sequential"].repeats == 299  # the configured 6 is overridden
    concurrent = phases["concurrent"]  # the batch size stays 4: ceil(299 / 4) batches
    assert (concurrent.kind, concurrent.repeats, concurrent.batches) == (PhaseKind.concurrent, 4, 75)
    assert protocol.requests_per_arm(typed.protocol, 2) == 1 + 2 * (299 + 300)
    groups = list(protocol.plan(typed.protocol, "m", {"p": "x"}))
    assert sum(1 for g in groups if g[0].phase == "concurrent") == 75
    assert protocol.sample_size(typed.protocol)["cell_requests"] == {"sequential": 299, "concurrent": 300}


def _row(prompt: str, sig: str | None, role: str = "measured", error: str | None = None) -> dict[str, object]:
    return {"prompt_id": prompt, "phase": "seq", "role": role, "error": error, "sig_top_logprobs": sig}


def test_a_cell_stops_at_its_kth_divergence_from_the_modal_signature() -> None:
    rule = StopRule(2)
    rule.observe([_row("a", "x"), _row("a", "x"), _row("a", "y")])
    assert not rule.stopped("a", "seq")  # one divergent so far
    rule.observe([_row("a", "z", error="HTTP 500"), _row("a", None), _row("a", "q", role="warmup")])
    assert not rule.stopped("a", "seq")  # errors, no signature and warm-up count for nothing
    rule.observe([_row("a", "y")])
    assert rule.stopped("a", "seq") and not rule.stopped("b", "seq")


def test_a_cell_signed_on_its_text_stops_too() -> None:
    """transformers serve returns no logprobs or ids: its cells are signed, and stopped, on their text."""
    rule = StopRule(1)
    text = [{"prompt_id": "a", "phase": "seq", "role": "measured", "error": None, "sig_top_logprobs": None,
             "sig_token_ids": None, "sig_text": t} for t in ("x", "x", "y")]
    rule.observe(text[:2])
    assert not rule.stopped("a", "seq")
    rule.observe(text[2:])
    assert rule.stopped("a", "seq")
    mixed = StopRule(1)  # a basis counts only when every row has it: here the text (the ids are missing once)
    mixed.observe([{**text[0], "sig_token_ids": "i"}, {**text[1], "sig_token_ids": "j"}, text[1]])
    assert not mixed.stopped("a", "seq")


def test_a_stopped_cell_reports_a_lower_bound_only_and_says_so() -> None:
    assert stopped_lower_bound(1, 2) == clopper_pearson(1, 2)[0] > 0
    cell = Cell("fused", "p", "seq", n=2, errors=0, distinct_completions=1, distinct_signatures=2, divergent=1,
                upper_bound_95=None, lower_bound_95=stopped_lower_bound(1, 2), stopped_after=1)
    text = rate(cell)
    assert text.startswith("stopped after 1 divergent in 2 (stop_after_divergences=1): divergence shown; "
                           "rate >= 1.3 % at 95 %")
    assert "not estimated beyond this lower bound" in text


def _study(stop: int | None) -> Config:
    overrides = ["protocol=smoke"] + ([f"protocol.stop_after_divergences={stop}"] if stop else [])
    typed = config.to_typed(config.compose(overrides))
    for name, arm in typed.arms.items():
        arm.image = "fake-noisy" if name == "wide_batch" else "fake-engine"
        arm.build.context = None
    return typed


def test_the_noisy_arm_stops_early_the_steady_one_runs_its_full_n_and_resume_sends_nothing(tmp_path: Path) -> None:
    typed = _study(1)
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-stop", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    rows = read_table(paths, "responses").to_pylist()
    per_arm = {arm: [r for r in rows if r["arm"] == arm and r["role"] == "measured"] for arm in typed.arms}
    prompts = len(typed.prompts.prompts)
    assert len(per_arm["baseline"]) == prompts * (6 + 4 * 2)  # never diverges: full n
    # the noisy arm: 2 sequential requests (the 2nd diverges), 1 batch of 4 (never cut mid-batch)
    assert len(per_arm["wide_batch"]) == prompts * (2 + 4)
    assert len({r["request_id"] for r in rows}) == len(rows)  # one row per request sent, none for the others
    cells = compare([paths], "baseline", stop_after_divergences=1).cells
    stopped = [c for c in cells if c.stopped_after is not None]
    assert {c.arm for c in stopped} == {"wide_batch"} and len(stopped) == 2 * prompts
    assert all(c.upper_bound_95 is None and (c.lower_bound_95 or 0) > 0 for c in stopped)
    steady = [c for c in cells if c.arm == "baseline"]
    assert all(c.divergent == 0 and c.upper_bound_95 == upper_bound_zero(c.n) for c in steady)
    [sentence] = sample_size(compare([paths], "baseline", stop_after_divergences=1),
                             protocol.sample_size(typed.protocol))
    assert f"stop_after_divergences=1: {2 * prompts} of {4 * prompts} cells stopped once 1" in sentence
    assert resume_plan(typed, paths).groups == {}  # a stopped cell sends nothing more
    assert set(resume_plan(_study(None), paths).groups) == {"wide_batch"}  # without the rule they were missing


def test_a_resumed_cell_counts_the_divergences_already_recorded(tmp_path: Path) -> None:
    """A record stopped at k=2, resumed under k=3: each noisy cell sends only until its 3rd divergence, counting
    the 2 already recorded, and the steady arm sends nothing."""
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(_study(2), paths, "run-stop2", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()

    def sequential() -> list[dict[str, object]]:
        return [r for r in read_table(paths, "responses").to_pylist()
                if r["arm"] == "wide_batch" and r["phase"] == "sequential" and r["role"] == "measured"]

    prompts = len(_study(2).prompts.prompts)
    assert len(sequential()) == 3 * prompts  # the 2nd and 3rd diverge from the 1st
    typed = _study(3)
    plan = resume_plan(typed, paths)
    assert set(plan.groups) == {"wide_batch"} and len(plan.recorded["wide_batch"]) > 0
    resumed = StudyRunner(typed, paths, "run-stop2-r1", fake_runtime(), say=lambda _: None, resume=plan)
    resumed.run()
    resumed.cleanup()
    rows = sequential()
    assert 3 * prompts < len(rows) < 6 * prompts  # more sent, but not the full n
    rule = StopRule(3)
    rule.observe(rows)
    assert all(rule.stopped(str(p), "sequential") for p in {r["prompt_id"] for r in rows})
    assert resume_plan(typed, paths).groups == {}


def test_plan_prints_each_arms_requests_and_its_engine_time_from_an_earlier_run(tmp_path: Path) -> None:
    from orchestrator.record.paths import atomic_write_text
    from orchestrator.run.plan import render

    typed = _study(1)
    unknown = render(typed)
    prompts = len(typed.prompts.prompts)
    assert (f"# arm baseline requests: at most {1 + prompts * (6 + 8)} (1 cold, 0 warm-up, per cell of {prompts} "
            "prompts: sequential 6, concurrent 2 x 4 = 8; a cell ends once 1 diverged") in unknown
    assert "# arm baseline expected engine time: unknown (no earlier run" in unknown
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-like", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    atomic_write_text(paths.meta, json.dumps({"study": typed.study.name}))
    rows = read_table(paths, "responses").to_pylist()
    sequential = [(r["recv_ns"] - r["send_ns"]) / 1e9 for r in rows
                  if r["arm"] == "baseline" and r["phase"] == "sequential" and r["role"] == "measured"]
    like = render(typed, paths.root)
    [line] = [x for x in like.splitlines() if x.startswith("# arm baseline expected engine time")]
    assert line.startswith("# arm baseline expected engine time: at most ")
    assert f"sequential {sum(sequential) / len(sequential):.3g} s/request" in line and " s/batch" in line
    # the noisy arm stopped early there, yet each of its phases has a mean: the estimate is known for it too
    assert "# arm wide_batch expected engine time: at most " in like
