"""A whole study with runtime=process: the reference engine as local processes, no Docker host needed.
Every server this runs is recorded in a per-test state dir (ORCHESTRATOR_PROCESS_DIR), so "nothing
is left behind" is checked by pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, interrupt, orchestrator

PROCESS = ["runtime=process", "arm@arms.baseline=reference_process", "arm@arms.wide_batch=reference_process"]
QUICK = ["protocol.phases.sequential.repeats=3", "protocol.phases.concurrent.repeats=3",
         "protocol.phases.concurrent.batches=1", "protocol.request.max_tokens=8"]
LONG = [*PROCESS, "~arms.wide_batch", "protocol.phases.sequential.repeats=500"]


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)}


def _records(state: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in state.glob("*/process.json")] if state.is_dir() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] != "Z"


@pytest.fixture(scope="module")
def process_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    base = tmp_path_factory.mktemp("process")
    run_dir, state = base / "run", base / "state"
    result = orchestrator("run", f"hydra.run.dir={run_dir}", *PROCESS, *QUICK, env=_env(state))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout, state


def test_process_study_lands_three_tables(process_run: tuple[Path, str, Path]) -> None:
    run_dir, _, state = process_run
    responses = pq.read_table(run_dir / "data" / "responses").to_pylist()
    assert len(responses) == 2 * (1 + 2 * (3 + 3))  # a cold request each, then 2 prompts
    assert {r["arm"] for r in responses} == {"baseline", "wide_batch"}
    assert all(r["http_status"] == 200 and r["error"] is None and r["sig_top_logprobs"] for r in responses)
    arms = pq.read_table(run_dir / "data" / "arms").to_pylist()
    assert [a["status"] for a in arms] == ["completed", "completed"]
    assert all(a["image_id"].startswith("process:sha256:") for a in arms)
    assert all(a["exit_code"] == 0 for a in arms)  # SIGTERM, then a clean shutdown
    fingerprint = json.loads(arms[0]["fingerprint_json"])
    assert fingerprint["probe"]["env"]["PYTHONPATH"] == "arms/reference-engine"  # env as configured
    assert fingerprint["log_facts"]["fused_finalize"] == "off"
    logs = pq.read_table(run_dir / "data" / "logs").to_pylist()
    assert {r["arm"] for r in logs} == {"baseline", "wide_batch"}
    assert any("Starting vLLM-compatible server on http://127.0.0.1:" in r["text"] for r in logs)
    guard = json.loads((run_dir / "guard.json").read_text())
    assert all(k["checked"] and not k["unknown"] for k in guard["knobs"].values())  # knobs via run_oneshot
    assert _records(state) == []  # every process record removed with its process


def test_process_study_report(process_run: tuple[Path, str, Path]) -> None:
    run_dir, stdout, _ = process_run
    report = json.loads((run_dir / "report.json").read_text())
    assert len(report["cells"]) == 2 * 2 * 2
    assert all(c["distinct_signatures"] == 1 for c in report["cells"])
    assert all(p["verdict"] == "identical" for p in report["pairs"])
    assert "report.md" in stdout
    assert "| baseline | capital | sequential |" in (run_dir / "report.md").read_text()


def test_a_runtime_added_in_one_module_and_its_conf_entry_runs_the_default_study(
        tmp_path: Path, process_run: tuple[Path, str, Path]) -> None:
    """docs/ARCHITECTURE.md's "a new runtime": tests/wrapped_runtime.py plus tests/wrapped_conf/runtime/wrapped.yaml
    (a user config dir), from another working directory; the same report as the process runtime's."""
    run_dir, state = tmp_path / "run", tmp_path / "state"
    result = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--config-dir",
                             str(ROOT / "tests" / "wrapped_conf"), "runtime=wrapped", f"hydra.run.dir={run_dir}",
                             *PROCESS[1:], *QUICK], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600,
                            env={**_env(state), "PYTHONPATH": str(ROOT)})  # the module's package: tests
    assert result.returncode == 0, result.stderr[-3000:]
    arms = pq.read_table(run_dir / "data" / "arms").to_pylist()
    assert [a["status"] for a in arms] == ["completed", "completed"]
    assert all(a["image_id"].startswith("process:sha256:") for a in arms)  # its identity kind: code
    assert _records(state) == []  # its servers stopped and removed
    ours, theirs = (json.loads((d / "report.json").read_text()) for d in (run_dir, process_run[0]))
    assert [p["verdict"] for p in ours["pairs"]] == [p["verdict"] for p in theirs["pairs"]]
    assert {p["verdict"] for p in ours["pairs"]} == {"identical"}
    assert [c["distinct_signatures"] for c in ours["cells"]] == [c["distinct_signatures"] for c in theirs["cells"]]


def _start_long_run(tmp_path: Path, state: Path) -> tuple[subprocess.Popen[str], list[int], str]:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp_path / 'run'}", *LONG],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(state))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "run" / "data" / "responses").glob("*.parquet")):
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.5)
    records = _records(state)
    pids = [int(r["pid"]) for r in records]  # type: ignore[call-overload]
    assert pids and all(_alive(pid) for pid in pids), "the arm's server should be running"
    return proc, pids, str(records[0]["labels"]["org.orchestrator.run"])  # type: ignore[index]


def test_interrupt_leaves_no_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc, pids, _ = _start_long_run(tmp_path, state)
    stderr = interrupt(proc)
    assert proc.returncode == 130, stderr
    assert not any(_alive(pid) for pid in pids)
    assert _records(state) == []
    arms = pq.read_table(tmp_path / "run" / "data" / "arms").to_pylist()
    assert arms[0]["status"] == "interrupted"
    assert pq.read_table(tmp_path / "run" / "data" / "responses").num_rows > 0


def test_clean_kills_what_a_killed_run_left(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc, pids, run_id = _start_long_run(tmp_path, state)
    for reaper in Path("/proc").glob("[0-9]*/cmdline"):  # the reaper dies too (e.g. the whole machine's OOM)
        with contextlib.suppress(OSError):
            if b"orchestrator.runtime.reaper" in reaper.read_bytes() and run_id.encode() in reaper.read_bytes():
                os.kill(int(reaper.parent.name), signal.SIGKILL)
    proc.kill()  # SIGKILL: no clean-up path runs; the server (its own session) survives
    proc.communicate(timeout=30)
    try:
        assert all(_alive(pid) for pid in pids)
        result = orchestrator("clean", "--runtime", "process", "--run", run_id, env=_env(state))
        assert result.returncode == 0, result.stderr
        assert "removed 1: " in result.stdout
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in pids)
        assert _records(state) == []
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_shared_scratch_dir_works_for_process_arms_and_private_caches_are_no_confound(tmp_path: Path) -> None:
    """Processes share one filesystem: a declared `share` is one host dir both arms use (the second loads the
    first's autotune entry), while each gets private library caches that the observed guard does not count."""
    from tests.e2e.test_mechanisms import cold_matches, run_study

    autotune = ["+arms.{a}.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR=/cache/autotune",
                "+arms.{a}.scratch={{autotune: {{container: /cache/autotune, share: autotune}}}}"]
    arms = ["arm@arms.fresh=reference_process", "arm@arms.reuse=reference_process"]
    report = run_study(tmp_path, "study=autotune_cold", "runtime=process", *arms,
                       *(o.format(a=a) for a in ("fresh", "reuse") for o in autotune))
    assert not cold_matches(report, "fresh") and cold_matches(report, "reuse")
    assert list((tmp_path / "scratch" / "autotune" / "autotune").glob("*.json"))
    guard = json.loads((tmp_path / "guard.json").read_text())
    (pair,) = guard["observed"]["pairs"]
    assert pair["verdict"] != "confounded" and not [k for k in pair["differing"] if k.startswith("env.")], pair


TEMPLATES = sorted(p.stem for p in (ROOT / "conf" / "arm").glob("*.yaml"))


def _mount_problems(template: str, cache: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The mount refusal a process start makes, for the shipped template as a process arm on a new machine: an
    empty HOME (no ~/.cache/huggingface), the engines' cache dir elsewhere."""
    from orchestrator import config
    from orchestrator.config.arms import container_spec
    from orchestrator.runtime.spec import missing_mounts

    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(cache))
    typed = config.to_typed(config.compose(["runtime=process", f"arm@arms.baseline={template}", "~arms.wide_batch"]))
    spec = container_spec("baseline", typed.arms["baseline"], "process", {}, {}, scratch_root=home / "scratch")
    return missing_mounts(spec)


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_shipped_template_starts_as_a_process_on_a_new_machine(template: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm.yaml's Hugging Face cache mount (${HOME}/.cache/huggingface) is named by nothing a process gets, so
    a new machine without that folder runs it; the models folder the argv names must be there, and the model."""
    for model in ("tiny-llama", "tiny-moe"):  # what `make vllm-cpu` / `make transformers-serve` make
        (tmp_path / "cache" / "models" / model).mkdir(parents=True)
    (tmp_path / "home").mkdir()
    assert _mount_problems(template, tmp_path / "cache", tmp_path / "home", monkeypatch) == []


def test_a_model_the_argv_names_under_a_mount_is_refused_when_it_is_not_there(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cache" / "models" / "tiny-moe").mkdir(parents=True)  # the folder is there, not the model
    (tmp_path / "home").mkdir()
    [problem] = _mount_problems("transformers_hooked_process", tmp_path / "cache", tmp_path / "home", monkeypatch)
    models = tmp_path / "cache" / "models"
    assert problem == (f"arm 'baseline': /models/tiny-llama is {models}/tiny-llama on this host (mount {models} -> "
                       "/models), which does not exist")


def test_a_mount_the_argv_names_is_still_refused_when_its_folder_is_missing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "home").mkdir()
    [problem] = _mount_problems("vllm_cpu_process", tmp_path / "no-cache", tmp_path / "home", monkeypatch)
    assert problem == (f"arm 'baseline': mount {tmp_path}/no-cache/models -> /models: {tmp_path}/no-cache/models "
                       "does not exist on this host")


def test_check_and_run_refuse_a_named_mount_without_its_folder_before_anything_starts(tmp_path: Path) -> None:
    arm = ["runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
           f"+arms.baseline.volumes=[{{host: {tmp_path}/nowhere, container: /data}}]", "+arms.baseline.env.FOO=/data/x"]
    said = {verb: orchestrator(verb, *arm, f"hydra.run.dir={tmp_path / verb}", env=_env(tmp_path / "state"))
            for verb in ("check", "run")}
    assert [r.returncode for r in said.values()] == [2, 2], said["run"].stderr[-2000:]
    assert said["check"].stderr == said["run"].stderr == (
        f"error: arm 'baseline': mount {tmp_path}/nowhere -> /data: {tmp_path}/nowhere does not exist on this host: "
        "create it, or point the volume at the folder\n")
    assert not (tmp_path / "run").exists() and not (tmp_path / "state").exists()
