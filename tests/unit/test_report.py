"""The report from a whole study on the fake runtime: report.json against a golden file (volatile fields
normalised), and the pieces whose wording matters: the headline's sentences, the gate's verdict, the
environment of a GPU or process arm, the pictures, and the modes of the files written.
Regenerate the golden file after an intended change with UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.results import Cell, Comparison
from orchestrator.record.paths import RunPaths, atomic_write_text
from orchestrator.record.recorded import ArmStart, read
from orchestrator.record.tables import TableWriter
from orchestrator.report import svg
from orchestrator.report.environment import arm_environment
from orchestrator.report.headline import gate_verdict, sentences
from tests.conftest import ROOT
from tests.recorded import noisy_study_run

GOLDEN = ROOT / "tests" / "golden" / "report" / "fake-noisy.json"
# timing of the batch's sends and of its arrivals at the server
VOLATILE = {"max_send_spread_ms", "send_spread_ms", "max_arrival_spread_ms", "arrival_spread_ms"}
# the arms' start times and memory peaks (report.json cost): a cost is asserted in tests/unit/test_cost.py
VOLATILE |= {"time_to_ready_s", "peak_memory_bytes", "peak_gpu_memory_bytes", "memory_note", "ratios"}


def fake_run(root: Path, gate: dict[str, Any] | None = None) -> RunPaths:
    return noisy_study_run(root, "run-golden", gate, host="golden-host")


def normalised(value: Any, run_dir: str) -> Any:
    if isinstance(value, dict):
        return {k: None if k in VOLATILE else normalised(v, run_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v, run_dir) for v in value]
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, str):  # `front`'s lines: the times to ready are volatile as the numbers are
        return re.sub(r"time to ready [^ ;,)]+ s", "time to ready T s", value.replace(run_dir, "RUN_DIR"))
    return value


def test_report_json_matches_golden(tmp_path: Path) -> None:
    paths = fake_run(tmp_path / "run", gate={"max_divergence_rate": 0.0})
    report = normalised(json.loads(paths.report_json.read_text()), str(paths.root))
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    assert GOLDEN.is_file(), "no golden report.json: run with UPDATE_GOLDEN=1"
    assert report == json.loads(GOLDEN.read_text())
    assert report["gate"]["verdict"] == "failed" and report["environment"]["commands"]["re-run the study"] == \
        "orchestrator run --from RUN_DIR"


def test_the_report_leads_with_the_verdict_then_the_environment(tmp_path: Path) -> None:
    text = fake_run(tmp_path / "run").report_md.read_text()
    verdict, environment, arms = (text.index(h) for h in ("## Verdict", "## Environment", "## Arms"))
    assert verdict < environment < arms
    assert "- wide_batch: sequential: 6 distinct in 6" in text and "Gate: not set" in text


def cell(**fields: Any) -> Cell:
    base = {"arm": "a", "prompt_id": "p", "phase": "concurrent", "n": 30, "errors": 0, "distinct_completions": 1,
            "distinct_signatures": 1, "divergent": 0, "upper_bound_95": 0.0950, "lower_bound_95": 0.0}
    return Cell(**{**base, **fields})


def test_a_sentence_names_the_numbers_the_bound_and_a_near_tie() -> None:
    comparison = Comparison(cells=[
        cell(phase="sequential"),
        cell(batch_size=64, capacity=64, min_running_observed=64, co_resident=True, distinct_signatures=3,
             divergent=2, n=64, lower_bound_95=0.004, upper_bound_95=0.108, first_divergent_position=17,
             top1_top2_gap=0.002, near_tie=True)])
    [line] = sentences(comparison, [], 0.01)
    assert line == ("a: sequential: 1 distinct in 30 (<= 9.5 % at 95 %); concurrent 64, co-resident 64: 3 distinct "
                    "in 64, divergence rate 0.4 %-10.8 % at 95 %, first divergence at token 17, top-1/top-2 gap "
                    "0.002: a near-tie.")
    far = Comparison(cells=[cell(distinct_signatures=2, divergent=1, first_divergent_position=3,
                                 top1_top2_gap=0.5, near_tie=False)])
    assert "gap 0.5: not a near-tie (>= 0.01)" in sentences(far, ["b"], 0.01)[1]
    assert sentences(far, ["b"], 0.01)[0].startswith("Measurement FAILED for arm(s) b")


def test_a_batch_that_was_not_together_says_so() -> None:
    comparison = Comparison(cells=[cell(batch_size=16, capacity=4, min_running_observed=2, co_resident=False,
                                        batches=3, batches_kept_out=1)])
    assert "concurrent 16 on capacity 4, NOT co-resident (at most 2 running together; 1 of 3 batches kept out " \
           "of the verdict)" in sentences(comparison, [], 0.01)[0]


def test_the_gate_verdict() -> None:
    comparison = Comparison(cells=[cell(distinct_signatures=2, divergent=1)])
    assert gate_verdict(comparison, None).sentence().startswith("Gate: not set")
    assert gate_verdict(comparison, {"max_divergence_rate": 0.5, "expect_pairs": {}}).sentence() == \
        "Gate: passed (max_divergence_rate 0.5)."
    failed = gate_verdict(comparison, {"max_divergence_rate": 0.0})
    assert failed.verdict == "failed" and "1 divergent in 30 exceeds" in failed.sentence()


def test_the_environment_of_a_gpu_arm_and_of_a_process_arm() -> None:
    fingerprint = {"probe": {"gpu": {"count": 1, "name": "NVIDIA H200", "capability": "9.0", "driver": "570.1"},
                             "cuda": "12.8", "packages": {"vllm": "0.32.0", "torch": "2.9.0"}, "python": "3.12.3"},
                   "log_facts": {"engine_version": "0.32.0"}, "docker_host": "ssh://gpu-box:22"}
    env = arm_environment(ArmStart.of({"arm": "x", "status": "completed", "image_id": "sha256:abc",
                                       "image_ref": "vllm:0.32", "fingerprint_json": json.dumps(fingerprint),
                                       "docker_run": "docker run ..."}))
    assert (env.gpu, env.cuda, env.engine_version, env.host) == ("1 x NVIDIA H200 (sm 9.0), driver 570.1", "12.8",
                                                                 "0.32.0", "ssh://gpu-box:22")
    assert list(env.packages) == ["torch", "vllm"]
    process = arm_environment(ArmStart.of({"arm": "p", "status": "failed", "image_id": None, "fingerprint_json": None}))
    assert process.identity.startswith("unknown") and process.gpu is None


def test_a_long_series_is_binned_and_every_mark_has_its_number() -> None:
    picture = svg.heatmap("spread", [("a/p/s", [0.0] * 2999 + [0.5])], "prompt position", {"a/p/s": 2999})
    assert picture.count("<rect ") == 2  # 200 columns of 15 positions; a run of equal spread is one rectangle
    assert "positions 0-2984: spread 0<" in picture and "positions 2985-2999: spread 0.5<" in picture
    assert "15 positions per column, each the largest spread of its positions" in picture
    assert "first divergence at position 2999" in picture and svg.heatmap("empty", [], "x") == ""
    assert re.search(r'fill-opacity="1\.000"', picture)


def test_the_heatmap_draws_at_most_max_rows_cells_the_largest_spread_first() -> None:
    flat = [(f"a/flat{i}/s", [0.0] * 64) for i in range(30)]
    spread = [(f"b/p{i:02d}/s", [0.0] * 32 + [0.01 * (i + 1)] * 32) for i in range(50)]
    picture = svg.heatmap("spread", flat + spread, "generated position")
    assert picture.count("<rect ") == 2 * svg.MAX_ROWS  # per row: the zeros, then one run of one spread
    assert "b/p49/s" in picture and "b/p10/s" in picture and "b/p09/s" not in picture and "flat" not in picture
    assert (f"{svg.MAX_ROWS} of 80 cells drawn, the largest spread first; not drawn: 30 cells with spread 0 at "
            "every position, 10 cells of smaller spread") in picture
    few = svg.heatmap("spread", flat[:3] + spread[:2], "generated position")
    assert "a/flat0/s" in few and "not drawn" not in few  # a small study keeps every row


@pytest.fixture()
def umask_of(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


@pytest.mark.parametrize("umask_of", [0o022, 0o077, 0o002], indirect=True)
def test_files_are_written_with_the_umask(tmp_path: Path, umask_of: int) -> None:
    atomic_write_text(tmp_path / "report.md", "x")
    with TableWriter(RunPaths(tmp_path), "logs", "arm") as writer:
        writer.append({"run_id": "r", "arm": "a", "seq": 0, "text": "line"})
    [part] = (tmp_path / "data" / "logs").glob("*.parquet")
    for path in (tmp_path / "report.md", part):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask_of
    assert stat.S_IMODE(part.parent.stat().st_mode) == 0o777 & ~umask_of


def test_ls_lists_each_run_and_show_prints_its_verdict_and_environment(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli import main

    paths = fake_run(tmp_path / "runs" / "default" / "one", gate={"max_divergence_rate": 0.0})
    (tmp_path / "runs" / "other").mkdir()
    assert main(["ls", str(tmp_path / "runs")]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["study", "started", "(UTC)"]
    said = ("gate failed; baseline: one signature in 4 of 4 cells; wide_batch: varies in 4 of 4 cells; A/B "
            "wide_batch vs baseline: differ in 4 of 4 cells")  # each arm's repeatability and the A/B's result
    assert row.startswith("default ") and f"baseline, wide_batch  {said}  " in row and row.endswith(str(paths.root))
    assert main(["show", str(paths.root)]) == 0
    shown = capsys.readouterr().out
    assert f"verdict: {said}" in shown
    assert "- wide_batch: sequential: 6 distinct in 6" in shown and "Gate: FAILED (max_divergence_rate 0.0)" in shown
    assert f"re-run the study: orchestrator run --from {paths.root}" in shown and "$ docker run -d --init" in shown
    assert main(["show", str(tmp_path / "runs" / "other")]) == 2
    assert "is not a run directory (no run.json)" in capsys.readouterr().err  # not: compare it
    paths.report_json.unlink()  # killed before its report (kill -9 leaves no mark): what the record holds
    assert main(["show", str(paths.root)]) == 0
    shown = capsys.readouterr().out
    assert "no report: killed before it (kill -9 leaves no mark) or still running" in shown
    assert "- baseline (completed):" in shown and f"`orchestrator run --resume {paths.root}` sends the rest" in shown
    assert main(["ls", str(tmp_path / "runs")]) == 0
    assert "no report: killed before it" in capsys.readouterr().out
    assert main(["ls", str(tmp_path / "missing")]) == 2


def test_the_cells_section_says_what_its_signatures_hash() -> None:
    """A text-signed engine (transformers serve) must not read 'top-k logprobs at 12 significant digits'."""
    from orchestrator.analysis.results import Cell
    from orchestrator.report.markdown import signature_sentence

    def cell(basis: str) -> Cell:
        c = Cell("a", "p", "sequential", 4, 0, 1, 1, 0, None, None)
        c.signature_basis = basis
        return c

    assert signature_sentence([cell("top_logprobs")]) == "Signatures hash the top-k logprobs at 12 significant digits."
    assert signature_sentence([cell("text")] * 2) == \
        "Signatures hash the completion text (no top logprobs or token ids returned)."
    mixed = signature_sentence([cell("text"), cell("text"), cell("top_logprobs")])
    assert "the completion text (no top logprobs or token ids returned) in 2 cells" in mixed
    assert "the top-k logprobs at 12 significant digits in 1 cell" in mixed


def test_an_unobservable_co_residency_is_not_written_as_zero() -> None:
    """transformers serve has no /metrics and no trace: 'not observable', never '0 of 8'."""
    from orchestrator.analysis.results import Cell
    from orchestrator.report.markdown import no_difference

    cells = [Cell("a", p, "concurrent", 8, 0, 1, 1, 0, 0.0, 0.3, batch_size=8) for p in ("x", "y")]
    assert "Concurrent cells co-resident: not observable (batches of 8" in no_difference(cells)
    cells[0].co_resident, cells[1].co_resident = True, False
    assert "Concurrent cells co-resident: 1 of 2 (batches of 8" in no_difference(cells)


def test_an_engine_that_states_no_version_shows_its_distribution_s() -> None:
    """transformers serve has no /version and no version log line: the environment's engine column shows
    its own distribution as the arm's probe found it, not '-'."""
    import json as _json

    from orchestrator.report.environment import arm_environment

    row = {"arm": "cb", "config_json": _json.dumps({"engine": "transformers_serve"}),
           "fingerprint_json": _json.dumps({"probe": {"packages": {"torch": "2.13.0", "transformers": "5.25.0"}}})}
    assert arm_environment(ArmStart.of(row)).engine_version == "transformers 5.25.0"
    row["config_json"] = _json.dumps({"engine": "some_engine_of_a_newer_orchestrator"})
    assert arm_environment(ArmStart.of(row)).engine_version is None


def test_the_verdict_gives_each_arm_s_repeatability_and_the_ab_s_result() -> None:
    """Each arm repeatable, the A/B differing in every cell, on the completion text (transformers serve): the
    bold line must not say 'No difference observed', and the verdict, `show` and `ls` say the basis."""
    from orchestrator.analysis.results import PairCheck
    from orchestrator.report.headline import summary
    from orchestrator.report.markdown import headline

    cells = [cell(arm=arm, prompt_id=p, phase="sequential", signature_basis="text")
             for arm in ("fp32", "bf16") for p in ("x", "y")]
    pairs = [PairCheck(p, "differ", 3, None, compared_on="text", test="Fisher-Freeman-Halton exact test",
                       p_value=2 / 924, arm_a="fp32", arm_b="bf16", phase="sequential") for p in ("x", "y")]
    comparison = Comparison(cells=cells, pairs=pairs)
    line = headline(comparison)
    assert "No difference observed" not in line and "2 of 2 pair comparisons (A/B) differ" in line
    assert "**Each arm repeatable, the arms differ**: one signature in each of 4 cells, compared on completion " \
           "text only" in line
    said = sentences(comparison, [], 0.01)
    assert said[0].startswith("fp32 (compared on completion text only): sequential: 1 distinct in 30")
    assert said[2] == ("A/B bf16 vs fp32: differ for 2 of 2 prompt x phase cells (first differing token 3; 2 judged "
                       "on their signature distributions by the Fisher-Freeman-Halton exact test: p = 0.0022, where "
                       "differ means p < 0.05), compared on completion text only; one signature in every cell of "
                       "either arm, so the difference lies between the arms.")
    assert summary(comparison) == ("fp32: one signature in 2 of 2 cells, compared on completion text only; bf16: one "
                                   "signature in 2 of 2 cells, compared on completion text only; A/B bf16 vs fp32: "
                                   "differ in 2 of 2 cells, compared on completion text only")
    pairs[0].verdict, pairs[1].verdict = "identical", "identical"
    pairs[0].test = pairs[1].test = ""
    pairs[0].p_value = pairs[1].p_value = pairs[0].first_divergent_position = pairs[1].first_divergent_position = None
    assert "**No difference observed**: one signature in each of 4 cells, compared on completion text only" in \
        headline(comparison)


def test_an_aa_that_reproduces_every_signature_reads_same_distribution() -> None:
    """The H200's A/A of two starts of transformers serve with continuous batching: several signatures per cell,
    each with the same count on both sides: 'same distribution', and the A/B is read against it."""
    from orchestrator.analysis.results import PairCheck

    cells = [cell(arm=arm, prompt_id=p, distinct_signatures=6, divergent=54, n=64)
             for arm in ("cb", "cb_aa", "eager") for p in ("x", "y")]
    aa = [PairCheck(p, "same distribution", None, None, arm_a="cb", arm_b="cb_aa", phase="concurrent")
          for p in ("x", "y")]
    ab = [PairCheck("x", "differ", None, None, test="Fisher-Freeman-Halton exact test", p_value=0.001, arm_a="cb",
                    arm_b="eager", phase="concurrent"),
          PairCheck("y", "no difference shown", None, None, test="Fisher-Freeman-Halton exact test", p_value=0.4,
                    arm_a="cb", arm_b="eager", phase="concurrent")]
    said = sentences(Comparison(cells=cells, pairs=aa + ab), [], 0.01)
    assert "A/A cb_aa vs cb (the noise floor: two starts of one config): same distribution for 2 of 2 prompt x " \
           "phase cells." in said
    [line] = [s for s in said if s.startswith("A/B")]
    assert line.startswith("A/B eager vs cb: differ for 1, no difference shown for 1 of 2 prompt x phase cells (2 "
                           "judged on their signature distributions by the Fisher-Freeman-Halton exact test: "
                           "p 0.001-0.4, where differ means p < 0.05)")
    assert "beyond the noise floor in 1 of 1 differing cells (the A/A does not differ there)" in line


def test_a_pool_says_which_cells_the_stop_rule_left_out() -> None:
    from orchestrator.analysis.results import PooledBound
    from orchestrator.report.markdown import details
    from orchestrator.report.model import StudyReport

    stopped = cell(arm="variant", prompt_id="q", divergent=2, n=35, stopped_after=2, lower_bound_95=0.057,
                   upper_bound_95=None)
    pool = PooledBound("variant", 4, 0, 246, 0.0, 0.012, "assumes one common rate", left_out=[stopped.label])
    text = "\n".join(details(StudyReport("s", "r", None, [], Comparison(cells=[stopped], pooled=[pool]))))
    assert ("| variant | 4 | 0 | 246 | 0.0%-1.2% | assumes one common rate | 1 cell the stop rule ended (n not "
            "fixed; divergence shown): variant/q/concurrent (rate >= 5.7%) |") in text


def test_arms_side_by_side_show_each_wave_s_wall_time_against_their_sum(tmp_path: Path) -> None:
    """study.parallel_arms: the stages add up over arms that ran at once (requests 18.75 s in a 14.15 s run),
    so the time line gives each wave's wall time, from the arms table, and the sum it saved against."""
    from orchestrator.report.build import wave_times
    from orchestrator.report.markdown import timings_line

    paths = RunPaths(tmp_path).make()
    second = 1_000_000_000
    with TableWriter(paths, "arms", "a") as writer:
        for arm, wave, start, stop in (("a", 1, 0, 9), ("b", 1, 1, 8), ("c", 2, 10, 15)):
            writer.append({"run_id": "r", "arm": arm, "wave": wave, "start_ns": start * second,
                           "stop_ns": stop * second})
    waves = wave_times(read(paths))
    assert [(w.wave, w.arms, w.wall_s, w.arm_s) for w in waves] == [(1, ["a", "b"], 9.0, 16.0), (2, ["c"], 5.0, 5.0)]
    assert timings_line({"requests": 18.75}, waves) == (
        "requests 18.75 s (an arm's stages summed over arms that ran at once); arms side by side in 2 waves: "
        "14.00 s wall (wave 1 (a, b) 9.00 s, wave 2 (c) 5.00 s) against 21.00 s of arm time one after another")
    assert timings_line({"requests": 4.0}, []) == "requests 4.00 s"  # one by one: nothing to add up
    assert timings_line({"stop_behind_next_start": 0.2, "stop_and_logs": 0.18}, []) == (
        "stop behind next start 0.20 s, stop and logs 0.18 s (the stops behind the next start ran during the next "
        "arm's start to ready)")


def test_a_record_short_of_requests_says_incomplete_in_its_verdict_line(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed with kill -9 and then compared: `ls` and `show` open with INCOMPLETE, not a clean verdict of
    what was recorded (report.json keeps the lines as `incomplete`)."""
    import json

    from orchestrator.cli import main

    paths = fake_run(tmp_path / "runs" / "default" / "one")
    report = json.loads(paths.report_json.read_text())
    assert "incomplete" not in report and not main(["ls", str(tmp_path / "runs")])
    assert "INCOMPLETE" not in capsys.readouterr().out
    report["incomplete"] = [f"INCOMPLETE: arm wide_batch has 0 of 23 requests recorded: `orchestrator run --resume "
                            f"{paths.root}` sends the rest"]
    paths.report_json.write_text(json.dumps(report))
    assert main(["show", str(paths.root)]) == 0
    assert "verdict: INCOMPLETE (1 arm short; run --resume finishes it): " in capsys.readouterr().out
    assert main(["ls", str(tmp_path / "runs")]) == 0
    assert "INCOMPLETE (1 arm short" in capsys.readouterr().out
