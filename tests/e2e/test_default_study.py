"""The walking skeleton end to end: real containers, real HTTP, real Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = pytest.mark.docker

QUICK = ["protocol.phases.sequential.repeats=3", "protocol.phases.concurrent.repeats=3",
         "protocol.phases.concurrent.batches=1", "protocol.request.max_tokens=8"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory, docker_client) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    def labelled() -> set[str]:
        return {c.name for c in docker_client.containers.list(all=True, filters={"label": "org.orchestrator.run"})}

    before = labelled()  # a killed earlier session's leftovers on a reused machine are not this run's
    run_dir = tmp_path_factory.mktemp("default") / "run"
    result = orchestrator("run", f"hydra.run.dir={run_dir}", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    assert labelled() - before == set()
    return run_dir, result.stdout


def test_default_study_lands_three_tables(default_run: tuple[Path, str]) -> None:
    run_dir, _ = default_run
    responses = pq.read_table(run_dir / "data" / "responses").to_pylist()
    # 2 arms x 2 prompts x (3 sequential + 1 batch of 3 concurrent)
    assert len(responses) == 2 * (1 + 2 * (3 + 3))  # a cold request each, then 2 prompts
    assert {r["arm"] for r in responses} == {"baseline", "wide_batch"}
    assert sum(r["cold"] for r in responses) == 2  # the first request of each arm
    for row in responses:
        assert row["http_status"] == 200 and row["error"] is None
        body = json.loads(row["response_body"])  # exact bytes as received
        assert body["choices"][0]["text"] == row["completion_text"]
        assert len(row["top_logprobs"]) == 8 and row["sig_top_logprobs"]
    arms = pq.read_table(run_dir / "data" / "arms").to_pylist()
    assert [a["status"] for a in arms] == ["completed", "completed"]
    assert all(a["image_id"].startswith("sha256:") for a in arms)
    assert all("docker run" in a["docker_run"] and "127.0.0.1::8000" in a["docker_run"] for a in arms)
    logs = pq.read_table(run_dir / "data" / "logs").to_pylist()
    assert {r["arm"] for r in logs} == {"baseline", "wide_batch"}
    assert any("Starting" in r["text"] for r in logs)
    assert (run_dir / ".hydra" / "config.yaml").is_file()


def test_default_study_report_says_one_distinct_per_cell(default_run: tuple[Path, str]) -> None:
    run_dir, stdout = default_run
    report = json.loads((run_dir / "report.json").read_text())
    assert len(report["cells"]) == 2 * 2 * 2
    for cell in report["cells"]:
        assert cell["distinct_completions"] == 1, cell
        assert cell["distinct_signatures"] == 1, cell
    assert all(p["verdict"] == "identical" for p in report["pairs"])
    assert "1 in 3" in stdout and "report.md" in stdout
    assert "| baseline | capital | sequential |" in (run_dir / "report.md").read_text()


def test_the_first_arm_stops_behind_the_second_one_s_start_and_before_its_first_request(
        default_run: tuple[Path, str]) -> None:
    run_dir, _ = default_run
    arms = {row["arm"]: row for row in pq.read_table(run_dir / "data" / "arms").to_pylist()}
    sent = [r["send_ns"] for r in pq.read_table(run_dir / "data" / "responses").to_pylist() if r["arm"] == "wide_batch"]
    assert arms["wide_batch"]["start_ns"] < arms["baseline"]["stop_ns"] <= min(sent)
    timings = json.loads((run_dir / "run.json").read_text())["timings_s"]
    assert timings["stop_behind_next_start"] > 0 and timings["stop_and_logs"] > 0  # the last arm's, in turn


def test_compare_reproduces_report(default_run: tuple[Path, str]) -> None:
    run_dir, _ = default_run
    before = (run_dir / "report.json").read_text()
    result = orchestrator("compare", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    assert result.stdout == before


def test_token_ids_warmup_and_the_server_trace_against_the_reference_engine(tmp_path: Path) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *QUICK, "~arms.wide_batch", "protocol.warmup_requests=2",
                          "protocol.request.prompt_as=token_ids")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(tmp_path / "data" / "responses").to_pylist()
    assert [r["role"] for r in rows[:3]] == ["cold", "warmup", "warmup"] and rows[3]["role"] == "measured"
    for row in rows:  # ids from the engine's /tokenize, counted back by its usage.prompt_tokens
        sent = json.loads(row["request_json"])["prompt"]
        assert isinstance(sent, list) and row["prompt_tokens"] == len(sent) and row["error"] is None, row["error"]
    report = json.loads((tmp_path / "report.json").read_text())
    # the cold and warm-up requests are in no cell; a batch the server did not show together (a loaded machine)
    # is kept out of its cell's n and counted as kept out
    kept_out = sum((c.get("batches_kept_out") or 0) * (c.get("batch_size") or 0) for c in report["cells"])
    assert sum(c["n"] for c in report["cells"]) + kept_out == len(rows) - 3
    [batch, *others] = report["batches"]  # one batch of 3 per prompt
    assert len(others) == 1 and batch["size"] == 3 and batch["together_source"] == "server trace"
    assert batch["arrival_spread_ms"] is not None and 1 <= batch["together"] <= 3


def test_overlapped_starts_against_the_reference_engine(tmp_path: Path) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *QUICK, "runtime.overlap_arm_starts=true")
    assert result.returncode == 0, result.stderr[-3000:]
    arms = {row["arm"]: row for row in pq.read_table(tmp_path / "data" / "arms").to_pylist()}
    rows = [r for r in pq.read_table(tmp_path / "data" / "responses").to_pylist() if r["arm"] == "baseline"]
    first_batch = min(r["send_ns"] for r in rows if r["phase_kind"] == "concurrent")
    assert arms["wide_batch"]["started_during"] == "baseline"
    assert arms["wide_batch"]["start_ns"] < arms["baseline"]["stop_ns"]  # it did overlap
    assert arms["wide_batch"]["ready_ns"] <= first_batch  # and was loaded before the baseline's batch
    report = json.loads((tmp_path / "report.json").read_text())
    assert all(c["distinct_signatures"] == 1 for c in report["cells"])
    assert "wide_batch started while baseline ran its sequential phases" in (tmp_path / "report.md").read_text()


def test_the_noise_floor_preset_against_the_reference_engine(tmp_path: Path) -> None:
    result = orchestrator("run", "study=noise_floor", f"hydra.run.dir={tmp_path}", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [a["arm"] for a in report["arms"]] == ["baseline", "baseline_aa", "wide_batch"]
    guard = json.dumps(report["guard"])
    assert "baseline_aa" in guard and "CONFOUNDED" not in guard  # changes nothing, in config and observed
    aa = [p for p in report["pairs"] if p["arm_b"] == "baseline_aa"]
    assert len(aa) == 4 and all(p["verdict"] == "identical" for p in aa)  # no mechanism on: two starts agree
    text = (tmp_path / "report.md").read_text()
    assert "A/A baseline_aa vs baseline (the noise floor: two starts of one config): identical for 4 of 4" in text
