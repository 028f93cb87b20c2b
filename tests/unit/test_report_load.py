"""The report of a study with load phases (tests/load_record.py's synthetic record through report/build.py):
report.md and report.html open with three lines per arm; report.json holds the cost under a versioned key; an
arm with no load phase, an unstreamed arm and a single window each say what they lack."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from orchestrator.record.paths import RunPaths, read_json
from orchestrator.report.build import build
from tests.load_record import ArmPlan, write_load_record


def _report(root: Path, plans: Mapping[str, ArmPlan | list[ArmPlan]]) -> RunPaths:
    paths = write_load_record(root, plans)
    build(paths, **read_json(paths.meta))
    return paths


def _opening(paths: RunPaths) -> list[str]:
    text = paths.report_md.read_text()
    head = text.split("## Verdict")[0]
    return [line.strip() for line in head.splitlines() if line.strip().startswith("- ")]


def test_the_page_opens_with_starts_correctness_and_cost_per_arm(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {
        "base": ArmPlan([0.10, 0.11, 0.09], ready_s=[4.1, 3.9, 4.4], traced=True),
        "slow": ArmPlan([0.20, 0.22, 0.18], divergent_probes=2, ready_s=[5.0])})
    lines = _opening(paths)
    assert lines[:4] == [
        "- **base**",
        "- Starts: 3 of 3 (failure rate 0 %, at most 63 % at 95 %); time to ready 4.1 s (3.9-4.4 s)",
        "- Stays correct: 0 of 6 probes diverged (at most 39 %) at poisson 8/s, each alongside 2-4 other requests "
        "(server trace)",
        "- Costs at poisson 8/s: 8.2 req/s, 82.1 tokens/s, p50 latency 0.1 s, p50 time to first token 0.02 s, "
        "errors 0 of 24"]
    assert lines[5] == "- Starts: 1 of 1 (one start: `study.starts: N` measures the failure rate); time to ready 5.0 s"
    assert lines[6].startswith("- Stays correct: 2 of 6 probes diverged (rate 4.3 %-78 % at 95 %) at poisson 8/s, "
                               "co-residents not observable")
    assert lines[6].endswith("; against base: not shown lower (+0.333, -0.123 to +0.700, Fisher p = 0.45)")
    assert "; against base: throughput ×0.91 [" in lines[7] and "latency ×2.00 [1.59, 2.51]" in lines[7]
    assert paths.report_md.read_text().index("## Per arm") < paths.report_md.read_text().index("## Verdict")


def test_report_json_holds_the_cost_under_a_versioned_key(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {"base": ArmPlan([0.1, 0.1]), "other": ArmPlan([0.1, 0.1], divergent_probes=1)})
    cost = json.loads(paths.report_json.read_text())["cost"]
    assert cost["schema_version"] == 1
    assert set(cost) == {"schema_version", "starts", "phases", "ratios", "rates", "co_residents"}
    latency = cost["phases"][0]["latency_s"]
    assert set(latency) >= {"unit", "avg", "p50", "p90", "p99", "std", "count"} and latency["unit"] == "s"
    assert [r["verdict"] for r in cost["rates"]] == ["not shown lower"]


def test_an_arm_with_no_load_phase_says_its_cost_was_not_measured(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {"seq": ArmPlan([0.1], kind="sequential", phase="sequential")})
    lines = _opening(paths)
    assert lines[2] == "- Stays correct: 0 of 2 warm requests diverged over 1 cells (at most 78 %)"
    assert lines[3] == "- Costs: not measured: no load phase"
    assert "## Cost per load point" not in paths.report_md.read_text()


def test_an_unstreamed_arm_says_not_observable_and_one_window_no_interval(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {"base": ArmPlan([0.1]), "plain": ArmPlan([0.3], streamed=False)})
    costs = _opening(paths)[-1]
    assert "time to first token not observable: not streamed" in costs
    # 8 requests over 0.875 s + 0.3 s against 0.875 s + 0.1 s
    assert "against base: throughput ×0.83 (no interval: one window), latency ×3.00 (no interval: one window)" \
        in costs
    table = paths.report_md.read_text().split("## Cost per load point")[1].split("##")[0]
    plain = next(line for line in table.splitlines() if line.startswith("| plain "))
    assert plain.count("not observable: not streamed") == 2  # time to first token and inter-token latency


def test_divergence_against_offered_load_as_a_table_and_a_chart(tmp_path: Path) -> None:
    plans: dict[str, ArmPlan | list[ArmPlan]] = {"base": [
        ArmPlan([0.1, 0.1], rate_per_s=4, phase="load_4"),
        ArmPlan([0.2, 0.2], rate_per_s=16, phase="load_16", divergent_probes=2)]}
    paths = _report(tmp_path / "run", plans)
    text = paths.report_md.read_text()
    table = text.split("## Divergence against offered load")[1]
    assert "| base | 4 | 0 of 4 |" in table and "| base | 16 | 2 of 4 |" in table
    assert "at poisson 4/s" in _opening(paths)[2] and "; 2 of 4 probes diverged" in _opening(paths)[2]
    page = paths.report_html.read_text()
    assert "base: divergence against offered load, beside throughput" in page
    assert page.index('id="opening"') < page.index('id="verdict"')


def test_a_sweep_over_load_points_draws_one_frontier_per_series(tmp_path: Path) -> None:
    """Jobs that differ only in the rate are one series; another swept key (max batch) makes two."""
    key, other = "protocol.phases.load_8.load.rate_per_s", "arms.base.engine_args.max-num-seqs"
    jobs, sources = {}, []
    for job, (rate, seqs) in enumerate([(4, 1), (16, 1), (4, 8), (16, 8)]):
        sources.append(write_load_record(tmp_path / "sweep" / str(job), {"base": ArmPlan(
            [0.1, 0.1], rate_per_s=rate, divergent_probes=int(seqs == 8 and rate == 16))}))
        jobs[str(job)] = {"arm": f"{job}/base", "overrides": {key: str(rate), other: str(seqs)}}
    sweep = {"swept_keys": [key, other], "jobs": jobs, "single_variable_pairs": []}
    out = RunPaths(tmp_path / "sweep")
    build(out, study="load (sweep)", run_id="sweep", baseline=None, sources=sources, arm_pairs=[], sweep=sweep)
    table = out.report_md.read_text().split("## Divergence against offered load")[1]
    assert f"| base ({other}=1) | 4 | 0 of 4 |" in table and f"| base ({other}=8) | 16 | 1 of 4 |" in table
    assert out.report_html.read_text().count("divergence against offered load, beside throughput</title>") == 2
