"""`orchestrator check` against the real Docker host: images, knobs listed by the engine in its image, the
run dir; exit 0 or 2, and nothing left running."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def test_check_passes_the_default_study_and_lists_what_it_checked() -> None:
    result = orchestrator("check")
    assert result.returncode == 0, result.stderr
    assert "ok config: study default, 2 arms" in result.stdout
    listed = re.search(r"ok knobs: baseline: (\d+) flags", result.stdout)
    assert listed and int(listed.group(1)) >= 40, result.stdout  # the reference engine's own listing


def test_check_finds_an_unknown_flag_through_the_engine_s_own_listing() -> None:
    result = orchestrator("check", *(f"+arms.{arm}.engine_args.max-num-seq=4" for arm in ("baseline", "wide_batch")))
    assert result.returncode == 2
    assert "flag --max-num-seq is not known to the engine" in result.stderr and "--max-num-seqs" in result.stderr


def test_check_names_a_missing_image_and_how_to_get_it() -> None:
    result = orchestrator("check", "arms.wide_batch.image=orchestrator/none:0", "arms.wide_batch.build.context=null",
                          "arms.wide_batch.build.hint='make images'")
    assert result.returncode == 2
    assert "arm 'wide_batch'" in result.stderr and "make images" in result.stderr


def test_a_process_arm_whose_interpreter_lacks_its_engine_is_refused_before_it_starts(tmp_path: Path) -> None:
    """The knob listing runs under the arm's interpreter: here the orchestrator's own (python3 with
    runtime.venv_on_path), which has no vLLM. That arm could not start, so `check` and `run` say so (exit 2)."""
    arm = ["runtime=process", "arm@arms.baseline=vllm_cpu_process", "arm@arms.wide_batch=vllm_cpu_process",
           "arms.baseline.python=python3", "arms.wide_batch.python=python3"]
    for verb in ("check", "run"):
        result = orchestrator(verb, *arm, f"hydra.run.dir={tmp_path / verb}")
        assert result.returncode == 2, result.stderr[-2000:]
        assert "arms.baseline='python3': must be where the engine is installed (python3 has no module 'vllm')" \
            in result.stderr and "runtime.venv_on_path" in result.stderr
    assert not (tmp_path / "run" / "run.json").exists()  # refused before the run dir was written


def test_documented_errors_that_need_the_engine_are_what_it_says(tmp_path: Path) -> None:
    """docs/ examples whose lines come from an engine's knob listing (tests/unit/test_docs.py runs the rest)."""
    from tests.unit.test_docs import ENGINE_EXAMPLES, documented_errors, matches, run_documented

    examples = [(command, lines) for _, command, lines in documented_errors() if command is not None
                and any(fragment in line for line in lines for fragment in ENGINE_EXAMPLES)]
    assert examples
    for command, lines in examples:
        said = run_documented(command, tmp_path)
        assert [line for line in lines if not matches(line, said)] == [], said


def test_check_refuses_what_run_refuses_with_the_same_lines(tmp_path: Path) -> None:
    """An arm that fits on no host, and a process arm given privileges: refused by both before anything starts
    (run used to fail at start, after writing its run dir)."""
    for study in (["arms.baseline.cpus=100000", "arms.wide_batch.cpus=100000"],
                  ["runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
                   "arms.baseline.cap_add=[SYS_NICE]", "+runtime.allow=[cap_add]"]):
        said = {verb: orchestrator(verb, *study, f"hydra.run.dir={tmp_path / verb}") for verb in ("check", "run")}
        assert [r.returncode for r in said.values()] == [2, 2], said["run"].stderr[-2000:]
        assert said["check"].stderr == said["run"].stderr and said["run"].stderr.startswith("error: ")
        assert not (tmp_path / "run").exists()


def test_check_of_a_sweep_says_each_job_s_warnings_naming_the_job() -> None:
    """`check -m`: every job checked as `run -m` checks it; a warning of any job is said, named by its job (the
    workload's: 2 distinct prompts for 8, then 24, requests in flight)."""
    at = "protocol.phases.load.load"
    result = orchestrator("check", "-m", "study=load_point", f"{at}.background=study", f"{at}.concurrency=8,24")
    assert result.returncode == 0, result.stderr
    assert "ok sweep: 2 jobs, each checked" in result.stdout
    warned = [line for line in result.stderr.splitlines() if "distinct prompts for" in line]
    assert [w.split(":", 1)[1].split(")", 1)[0].rsplit("=", 1)[-1] for w in warned] == ["8", "24"], warned
