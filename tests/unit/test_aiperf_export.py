"""`orchestrator compare RUN --export aiperf` (report/aiperf_export.py): the load phases of a synthetic record
whose costs are known by hand (tests/load_record.py: 8 requests a window, one every 125 ms, a fixed latency per
window, 10 tokens, the first at a fifth of the latency, then 9 gaps of a tenth) as AIPerf's profile export, and
that export read by AIPerf's own code where AIPerf is installed (tests/aiperf_reader.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, UsageError
from orchestrator.verbs import compare
from tests.conftest import ROOT
from tests.load_record import ArmPlan, write_load_record

AIPERF_PYTHON = Path(os.environ.get("AIPERF_PYTHON", Path.home() / ".cache/orchestrator/aiperf-venv/bin/python"))
NO_AIPERF = (f"AIPerf is not installed at {AIPERF_PYTHON} (python3 -m venv ~/.cache/orchestrator/aiperf-venv && "
             "~/.cache/orchestrator/aiperf-venv/bin/pip install aiperf; or set AIPERF_PYTHON)")


def _exported(tmp_path: Path) -> Path:
    run = write_load_record(tmp_path / "run", {"a": ArmPlan([0.10, 0.11, 0.09], errors=1),
                                               "b": ArmPlan([0.2, 0.2], streamed=False)}).root
    outcome = compare.main([str(run), "--export", "aiperf"])
    assert outcome.status == 0 and any(f"AIPerf profile export: {run / 'aiperf'}" in n for n in outcome.notes)
    return run


def test_each_request_sent_is_a_record_in_aiperfs_tags_and_units(tmp_path: Path) -> None:
    run = _exported(tmp_path)
    lines = [json.loads(x) for x in (run / "aiperf/a/load_8/profile_export.jsonl").read_text().splitlines()]
    assert len(lines) == 24  # 3 windows of 8; the warm-up is not exported, as the cost does not count it
    first = lines[0]
    assert first["metadata"]["request_start_ns"] == 100 * 10**9 and first["metadata"]["x_request_id"] == "a/load_8/0/0"
    assert first["metadata"]["benchmark_phase"] == "profiling" and first["metadata"]["phase_name"] == "load_8"
    metrics = first["metrics"]
    assert metrics["request_latency"] == {"value": pytest.approx(100.0), "unit": "ms"}
    assert metrics["time_to_first_token"]["value"] == pytest.approx(20.0)
    assert metrics["inter_chunk_latency"]["value"] == pytest.approx([10.0] * 9)
    assert metrics["inter_token_latency"]["value"] == pytest.approx(80.0 / 9)  # AIPerf's: (latency - TTFT) / (OSL - 1)
    assert metrics["output_sequence_length"] == {"value": 10, "unit": "tokens"}
    (failed,) = [line for line in lines if "error" in line]
    assert failed["error"] == {"code": None, "type": "read", "message": "server dropped the connection"}
    assert failed["metrics"] == {}


def test_the_summary_holds_the_costs_figures(tmp_path: Path) -> None:
    run = _exported(tmp_path)
    cost = {p["arm"]: p for p in json.loads((run / "report.json").read_text())["cost"]["phases"]}
    a = json.loads((run / "aiperf/a/load_8/profile_export_aiperf.json").read_text())
    assert a["schema_version"] == "1.4"
    assert a["request_throughput"] == {"unit": "requests/sec", "avg": pytest.approx(
        cost["a"]["request_throughput_per_s"]["avg"])}
    assert a["request_count"]["avg"] == 23 and a["error_request_count"]["avg"] == 1
    latency = cost["a"]["latency_s"]
    for stat in ("avg", "p50", "p90", "p99", "std", "min", "max"):
        assert a["request_latency"][stat] == pytest.approx(1e3 * latency[stat]), stat
    assert a["request_latency"]["count"] == latency["count"] == 23
    assert a["time_to_first_token"]["p50"] == pytest.approx(1e3 * cost["a"]["time_to_first_token_s"]["p50"])
    assert a["inter_chunk_latency"]["count"] == 23 * 9
    assert a["benchmark_duration"]["avg"] == pytest.approx(23 / cost["a"]["request_throughput_per_s"]["avg"])
    assert a["error_summary"] == [{"error_details": {"code": None, "type": "read",
                                                     "message": "server dropped the connection"}, "count": 1}]
    b = json.loads((run / "aiperf/b/load_8/profile_export_aiperf.json").read_text())
    assert "time_to_first_token" not in b and "inter_chunk_latency" not in b  # not streamed: left out, never 0


def test_a_run_without_a_load_phase_is_bad_input_and_nothing_is_written(tmp_path: Path) -> None:
    run = write_load_record(tmp_path / "run", {"a": ArmPlan([0.1], kind="sequential")}).root
    with pytest.raises(ConfigError, match="has no load phase to export"):
        compare.main([str(run), "--export", "aiperf"])
    assert not (run / "aiperf").exists() and not (run / "report.json").exists()
    with pytest.raises(UsageError, match="invalid choice: 'genai-perf'"):
        compare.main([str(run), "--export", "genai-perf"])


@pytest.mark.skipif(not AIPERF_PYTHON.is_file(), reason=NO_AIPERF)
def test_aiperfs_own_reader_reads_the_export(tmp_path: Path) -> None:
    run = _exported(tmp_path)
    done = subprocess.run([str(AIPERF_PYTHON), str(ROOT / "tests/aiperf_reader.py"), str(run / "aiperf")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout)
    assert sorted(read) == ["a/load_8", "b/load_8"]  # found as `aiperf plot` finds runs
    a = read["a/load_8"]
    assert a["records"] == a["loaded_rows"] == 24 and a["errors"] == 1 and a["schema_version"] == "1.4"
    # AIPerf's own stats over the records give the summary we wrote
    again, written = a["request_latency_again"], a["request_latency"]
    for stat in ("avg", "p1", "p50", "p90", "p99", "std", "min", "max", "count"):
        assert again[stat] == pytest.approx(written[stat]), stat
    assert a["loaded_latency_p50"] == pytest.approx(100.0) and a["time_to_first_token"]["p50"] == pytest.approx(20.0)
    assert read["b/load_8"]["time_to_first_token"] is None


def test_a_sweep_dir_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    write_load_record(sweep / "0", {"a": ArmPlan([0.1])})
    with pytest.raises(ConfigError, match="is a sweep; export one of its job dirs"):
        compare.main([str(sweep), "--export", "aiperf"])
    assert not (sweep / "0" / "aiperf").exists() and not (sweep / "0" / "report.json").exists()
