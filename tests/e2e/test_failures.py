"""What goes wrong is reported clearly, loses nothing, and leaves no container behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import LABEL, ROOT, interrupt, orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftover_containers")]
ONE_ARM = ["~arms.wide_batch", "protocol.phases.sequential.repeats=2", "~protocol.phases.concurrent"]


def test_container_that_dies_fails_fast_with_its_log(tmp_path: Path) -> None:
    result = orchestrator(
        "run", f"hydra.run.dir={tmp_path}", *ONE_ARM, "arms.baseline.image=orchestrator/debian-python:bookworm",
        "arms.baseline.engine_args={}",
        "arms.baseline.command=[python3,-c,'print(\"boom: no model\"); raise SystemExit(3)']")
    assert result.returncode == 4, result.stderr  # the measurement failed (docs/conventions.md)
    assert "exited with status 3" in result.stderr and "boom: no model" in result.stderr
    arms = pq.read_table(tmp_path / "data" / "arms").to_pylist()
    assert arms[0]["status"] == "failed" and arms[0]["exit_code"] == 3
    logs = pq.read_table(tmp_path / "data" / "logs").to_pylist()
    assert any("boom: no model" in line["text"] for line in logs)


def test_missing_image_is_named(tmp_path: Path) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path / 'run'}", *ONE_ARM,
                          "arms.baseline.image=orchestrator/does-not-exist:1", "arms.baseline.build.context=null")
    assert result.returncode == 2  # bad input, found before any arm starts
    assert "image 'orchestrator/does-not-exist:1' is not present" in result.stderr
    assert "For this arm: run `make images` (it builds orchestrator/reference-engine:0.1.0)." in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()  # nothing written: no .hydra/, no app.log


def test_an_image_typo_names_the_closest_image_the_docker_host_has_in_run_check_and_plan(tmp_path: Path) -> None:
    typo = ["arms.baseline.image=orchestrator/referense-engine:0.1.0"]
    said = ("arm 'baseline': image 'orchestrator/referense-engine:0.1.0' is not present on this Docker host (the "
            "closest it has: 'orchestrator/reference-engine:0.1.0')")
    for verb in ("run", "check"):  # nothing to build it from: refused, the same line by each verb
        result = orchestrator(verb, f"hydra.run.dir={tmp_path / 'run'}", *ONE_ARM, *typo,
                              "arms.baseline.build.context=null")
        assert result.returncode == 2 and result.stderr.startswith(f"error: {said} and the arm has no"), result.stderr
    assert not (tmp_path / "run").exists()
    # `plan` says it too, and still plans (it is read for other hosts); nothing is built
    planned = orchestrator("plan", *ONE_ARM, *typo, "arms.baseline.build.context=null")
    assert planned.returncode == 0 and f"warning: {said}; `check` and `run` refuse it" in planned.stderr
    assert "docker run" in planned.stdout
    planned = orchestrator("plan", *ONE_ARM, *typo)
    assert planned.returncode == 0 and f"warning: {said}; `run` tries to build it from " in planned.stderr
    # `fingerprint --image` has no arm and nothing to build: bad input too, not a failed measurement
    printed = orchestrator("fingerprint", "--image", "orchestrator/referense-engine:0.1.0")
    absent = said.removeprefix("arm 'baseline': ")
    assert printed.returncode == 2 and printed.stderr == f"error: {absent}: name an image it has (`docker images` " \
        "lists them), or build or load that one first\n", printed.stderr


def test_a_refused_sweep_job_leaves_no_dir_and_a_sweep_of_refused_jobs_nothing(tmp_path: Path) -> None:
    images = "arms.baseline.image=orchestrator/reference-engine:0.1.0,orchestrator/does-not-exist:1"
    result = orchestrator("run", "-m", images, "arms.baseline.build.context=null", *ONE_ARM,
                          f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 2, result.stderr[-2000:]  # the worst job's status
    assert (tmp_path / "sweep" / "0" / "run.json").is_file()  # the job that ran
    assert not (tmp_path / "sweep" / "1").exists()  # the refused one: not even Hydra's .hydra/ and app.log
    result = orchestrator("run", "-m", "+arms.baseline.engine_args.fused-finalise=true,false", *ONE_ARM,
                          f"hydra.sweep.dir={tmp_path / 'refused'}")
    assert result.returncode == 2 and "Did you mean '--fused-finalize'?" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "refused").exists()  # so the same command, fixed, may use the dir


def test_more_logprobs_than_the_engine_allows_is_refused_before_the_run(tmp_path: Path) -> None:
    # vLLM (and the reference engine) refuse more than --max-logprobs (20) with HTTP 400 per request.
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *ONE_ARM, "protocol.request.logprobs=25")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "arms.baseline.engine_args.max-logprobs: 25" in result.stderr
    assert not (tmp_path / "data").exists()  # nothing started

def test_server_errors_are_recorded_and_an_arm_with_no_answer_fails(tmp_path: Path) -> None:
    # An engine-specific extra the reference engine refuses: HTTP 400 for every request.
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *ONE_ARM, "+arms.baseline.request_extra.seed=soon")
    assert result.returncode == 4, result.stderr  # a study where an arm got no answer is never a success
    assert "no successful response: all 5 requests failed" in result.stderr  # the cold one, then 4
    rows = pq.read_table(tmp_path / "data" / "responses").to_pylist()
    assert len(rows) == 5
    assert all(r["http_status"] == 400 and "HTTP 400" in r["error"] for r in rows)
    assert all(b"'seed' must be an integer" in r["response_body"] for r in rows)  # the exact body
    report = json.loads((tmp_path / "report.json").read_text())
    assert all(c["n"] == 0 and c["distinct_signatures"] is None for c in report["cells"])
    [failure] = report["failures"]
    assert failure["arm"] == "baseline" and failure["failed_requests"] == 5
    assert "## Failures" in (tmp_path / "report.md").read_text()


def test_interrupt_stops_and_removes_containers(tmp_path: Path, docker_client) -> None:  # type: ignore[no-untyped-def]
    def ours() -> list[str]:  # this run's containers (named RUN_ID-ARM, the run id from the run dir's name)
        return [c.name for c in docker_client.containers.list(all=True, filters={"label": LABEL})
                if c.name.startswith(f"{tmp_path.name}-")]

    # Long answers (max_tokens 128): the Ctrl-C lands while a request is in flight, not in the gap between two.
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp_path}",
         "protocol.phases.sequential.repeats=500", "protocol.request.max_tokens=128"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list((tmp_path / "data" / "responses").glob("*.parquet")):
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.5)
        assert ours(), "the arm's container should be running"
    finally:
        stderr = interrupt(proc)
    assert proc.returncode == 130, stderr
    assert ours() == []
    arms = pq.read_table(tmp_path / "data" / "arms").to_pylist()
    assert arms[0]["status"] == "interrupted"
    assert pq.read_table(tmp_path / "data" / "responses").num_rows > 0  # what was received is kept
    assert f"`orchestrator run --resume {tmp_path}` sends the rest" in stderr.splitlines()[-1]
    assert json.loads((tmp_path / "run.json").read_text())["interrupted"]
    # the request in flight: recorded as interrupted, in no cell; every other row is an answer
    rows = pq.read_table(tmp_path / "data" / "responses").to_pylist()
    [cut] = [r for r in rows if r["role"] == "interrupted"]
    assert cut["error"].startswith("interrupted: sent, but the answer was not received")
    assert all(r["error"] is None for r in rows if r is not cut)

    shown = orchestrator("show", str(tmp_path))  # no report yet: what the record holds, marked interrupted
    assert shown.returncode == 0, shown.stderr
    assert "INTERRUPTED at" in shown.stdout and "1 cut off by the stop" in shown.stdout
    assert f"- baseline (interrupted): {len(rows) - 1} of " in shown.stdout
    assert "- wide_batch (not started): 0 of " in shown.stdout
    assert "interrupted, no report" in orchestrator("ls", str(tmp_path.parent)).stdout

    compared = orchestrator("compare", str(tmp_path))
    assert compared.returncode == 130, compared.stderr  # interrupted, not a measurement that failed (4)
    assert "interrupted: arm(s) baseline stopped by Ctrl-C or SIGTERM" in compared.stderr
    assert "arm(s) failed" not in compared.stderr and f"run --resume {tmp_path}" in compared.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert all(c["errors"] == 0 for c in report["cells"])  # the cut-off request is no error of its cell
    assert sum(c["n"] for c in report["cells"]) == len(rows) - 2  # all but the cold one and the cut-off one
    shown = orchestrator("show", str(tmp_path))  # with the report: marked interrupted too
    assert shown.returncode == 0 and "verdict: interrupted: baseline (run --resume finishes it)" in shown.stdout
