"""The report of a study with load phases (tests/load_record.py's synthetic record through report/build.py):
report.md and report.html open with three lines per arm; report.json holds the cost under a versioned key; an
arm with no load phase, an unstreamed arm and a single window each say what they lack."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, RunMeta, read, read_run
from orchestrator.report.build import build
from tests.load_record import ArmPlan, write_load_record


def _report(root: Path, plans: Mapping[str, ArmPlan | list[ArmPlan]]) -> RunPaths:
    paths = write_load_record(root, plans)
    build(read(paths))
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
        "errors 0 of 24; peak memory 2.0 GiB, no GPU"]
    assert lines[5] == "- Starts: 1 of 1 (one start: `study.starts: N` measures the failure rate); time to ready 5.0 s"
    assert lines[6].startswith("- Stays correct: 2 of 6 probes diverged (rate 4.3 %-78 % at 95 %) at poisson 8/s, "
                               "co-residents not observable")
    assert lines[6].endswith("; against base: not shown lower (+0.333, -0.123 to +0.700, Fisher p = 0.45)")
    # The windows of one schedule pair: B's latency is twice A's in each, so the interval is the point
    assert "; against base: throughput ×0.91 [" in lines[7] and "latency ×2.00 [2.00, 2.00]" in lines[7]
    assert paths.report_md.read_text().index("## Per arm") < paths.report_md.read_text().index("## Verdict")


def test_report_json_holds_the_cost_under_a_versioned_key(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {"base": ArmPlan([0.1, 0.1]), "other": ArmPlan([0.1, 0.1], divergent_probes=1)})
    cost = json.loads(paths.report_json.read_text())["cost"]
    assert cost["schema_version"] == 2
    assert set(cost) == {"schema_version", "starts", "phases", "ratios", "rates", "co_residents", "saturation",
                         "workloads"}
    latency = cost["phases"][0]["latency_s"]
    assert set(latency) >= {"unit", "avg", "p50", "p90", "p99", "std", "count"} and latency["unit"] == "s"
    assert [r["verdict"] for r in cost["rates"]] == ["not shown lower"]


def test_an_arm_with_no_load_phase_says_its_cost_was_not_measured(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {"seq": ArmPlan([0.1], kind="sequential", phase="sequential")})
    lines = _opening(paths)
    assert lines[2] == "- Stays correct: 0 of 2 warm requests diverged over 1 cells (at most 78 %)"
    assert lines[3] == "- Costs: not measured: no load phase recorded; peak memory 2.0 GiB, no GPU"
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
    assert _opening(paths)[2:5] == [
        "- Stays correct: 2 of 8 probes diverged over 2 load points, co-residents not observable (no server trace, "
        "no /metrics):",
        "- at poisson 4/s: 0 of 4 probes diverged (at most 53 %)",
        "- at poisson 16/s: 2 of 4 probes diverged (rate 6.8 %-93 % at 95 %)"]
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
    build(Recorded.of([read_run(s) for s in sources], out, RunMeta(study="load (sweep)", run_id="sweep", arm_pairs=[],
                                                                     sweep=sweep)))
    table = out.report_md.read_text().split("## Divergence against offered load")[1]
    assert f"| base ({other}=1) | 4 | 0 of 4 |" in table and f"| base ({other}=8) | 16 | 1 of 4 |" in table
    assert out.report_html.read_text().count("divergence against offered load, beside throughput</title>") == 2


def test_several_load_points_make_a_sub_bullet_each_with_the_memory_on_the_costs_line(tmp_path: Path) -> None:
    """A line per load point under a short one (markdown's nested list; report.html indents them alike), the
    arm's memory peaks on the Costs line and in the cost table, the baseline first though it sorts last."""
    paths = _report(tmp_path / "run", {
        "zbase": [ArmPlan([0.1, 0.1], rate_per_s=4, phase="load_4", peak_gpu_memory_bytes=3 * 2**30),
                  ArmPlan([0.2, 0.2], rate_per_s=16, phase="load_16", peak_gpu_memory_bytes=3 * 2**30)],
        "alt": [ArmPlan([0.1, 0.1], rate_per_s=4, phase="load_4", peak_memory_bytes=None),
                ArmPlan([0.2, 0.2], rate_per_s=16, phase="load_16", peak_memory_bytes=None)]})
    text = paths.report_md.read_text()
    assert text.index("- **zbase**") < text.index("- **alt**")
    assert "\n  - Costs: peak memory 2.0 GiB, GPU 3.0 GiB; per load point:\n    - at poisson 4/s: 8.2 req/s" in text
    assert "\n  - Costs: memory not observable (no cgroup), no GPU; per load point:\n    - at poisson 4/s: " in text
    alt = text.split("- **alt**")[1].split("## Verdict")[0]
    assert alt.count("\n    - at poisson") == 4 and "; against zbase: throughput ×" in alt
    table = text.split("## Cost per load point")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0] for row in rows] == ["| zbase", "| zbase", "| alt", "| alt"]
    assert rows[0].endswith("| 2.0 GiB | 3.0 GiB |") and rows[2].endswith("| not observable (no cgroup) | none, "
                                                                           "the arm has no GPUs |")
    ratios = text.split("## What B costs against A")[1].split("\n## ")[0]
    assert "| zbase | alt |" in ratios
    page = paths.report_html.read_text()
    assert "<p class='item l2'>&bull; at poisson 16/s: " in page and "<p class='item l1'>&bull; Costs: " in page


def test_top1_flips_in_the_cell_table_and_the_stays_correct_line(tmp_path: Path) -> None:
    paths = _report(tmp_path / "run", {"base": ArmPlan([0.1, 0.1], tokens=True),
                                       "flaky": ArmPlan([0.1, 0.1], tokens=True, divergent_probes=1),
                                       "text": ArmPlan([0.1, 0.1])})
    lines = _opening(paths)
    assert lines[6].startswith("- Stays correct: 1 of 4 probes diverged (rate 0.63 %-81 % at 95 %), 1 top-1 flip at "
                               "1 position at poisson 8/s")
    assert "top-1" not in lines[2]  # none flipped: nothing said
    table = paths.report_md.read_text().split("## Repeatability per cell")[1].split("\n## ")[0]
    row = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    assert row["| base"].endswith("| 0 |") and row["| flaky"].endswith("| 1 at position 2 |")
    assert row["| text"].endswith("| - |")  # no tokens returned: nothing to flip


def test_a_huge_ratio_interval_stays_readable() -> None:
    from orchestrator.analysis.cost_results import CostRatio
    from orchestrator.report.cost_md import costs_lines
    from orchestrator.report.table import compact

    assert [compact(v) for v in (196170.37, 1000.0, 999.4, 1.26, 0.01, 0.004, 0.0)] == [
        "2e+05", "1e+03", "999.40", "1.26", "0.01", "<0.01", "<0.01"]
    from orchestrator.analysis.cost_results import Metric, PhaseCost
    m = Metric("s", 1.0, 1.0, count=1)
    phase = PhaseCost("b", "load", "poisson 8/s", 8.0, 3, 24, 0, 0.0, m, m, m, m, m, m)
    line = costs_lines("b", [phase], [CostRatio("a", "b", "load", "latency_s", 3.0, 0.0, 196170.37, 3, 3)])[0]
    assert line.endswith("; against a: latency ×3.00 [<0.01, 2e+05]")


def test_a_load_point_with_fewer_prompts_than_requests_in_flight_is_warned(tmp_path: Path) -> None:
    """Two prompts (a probe's and one background), answers of 3 s every 1/8 s: about 6 requests in flight."""
    paths = _report(tmp_path / "run", {"base": ArmPlan([0.1, 0.1]), "slow": ArmPlan([3.0, 3.0])})
    lines = _opening(paths)
    assert "warning" not in lines[3]
    assert lines[-1].endswith("time to first token ×30.00 [30.00, 30.00]; warning: 2 distinct prompts for 6.2 "
                              "requests in flight: an engine with a prefix cache could serve most of them from "
                              "prompts it has seen (load.background: synthetic, the default, is a varied set)"), \
        lines[-1]
    workloads = json.loads(paths.report_json.read_text())["cost"]["workloads"]
    assert [(w["arm"], w["distinct_prompts"], round(w["in_flight"], 1), w["warning"] is not None)
            for w in workloads] == [("base", 2, 0.8, False), ("slow", 2, 6.2, True)]


def test_cells_stopped_after_diverging_are_said_beside_the_rate_they_are_left_out_of() -> None:
    """A triage A/B's arm as given: 2 sequential cells repeatable, 2 concurrent cells stopped after 2 divergences.
    Before, its line said "0 of 6 warm requests diverged" and nothing of the two cells that did."""
    from orchestrator.analysis.results import Cell
    from orchestrator.report.cost_md import correct_lines

    def cell(phase: str, n: int, divergent: int, stopped: int | None) -> Cell:
        made = Cell("as_given", "capital", phase, n, 0, 1 + divergent, 1 + divergent, divergent, 0.5, 0.0)
        made.stopped_after = stopped
        return made

    cells = [cell("sequential", 3, 0, None), cell("sequential", 3, 0, None), cell("concurrent", 8, 6, 2),
             cell("concurrent", 8, 5, 2)]
    assert correct_lines(cells, "as_given", [], []) == [
        "Stays correct: 0 of 6 warm requests diverged over 2 cells (at most 39 %); 2 more cells diverged and stopped "
        "early, left out of this rate"]
