"""Someone else's config, for real: a config dir of the user's own outside the project (an arm, a prompt
set with a prompt file beside it, a study), used from another working directory through every verb; a
run dir sent to a colleague re-runs and reproduces elsewhere; a sweep over the user's study runs every
job and exits with the worst job's status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from tests.conftest import ROOT

ARM = """defaults:
  - reference
  - _self_
description: my reference arm, smaller batches
engine_args:
  max-num-seqs: 4
"""
PROMPTS = """name: mine
prompts:
  hello:
    file: hello.txt  # beside this set, in the user's prompts/ folder
"""
STUDY = """# @package _global_
defaults:
  - /arm@arms.mine: my_reference
  - /arm@arms.base: reference
  - override /prompts: my_prompts
  - override /protocol: smoke
study:
  name: my_study
  baseline: base
  variables:
    mine: [engine_args.max-num-seqs, description]
"""
QUICK = ["protocol.phases.sequential.repeats=2", "protocol.phases.concurrent.repeats=2",
         "protocol.phases.concurrent.batches=1"]


@pytest.fixture()
def user_dir(tmp_path: Path) -> Path:
    root = tmp_path / "my-configs"
    for name, text in (("arm/my_reference.yaml", ARM), ("prompts/my_prompts.yaml", PROMPTS),
                       ("prompts/hello.txt", "Hello from a file of my own,"), ("study/my_study.yaml", STUDY)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The orchestrator from another working directory (never the checkout)."""
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_plan_finds_the_users_study_and_suggests_from_every_dir(user_dir: Path, tmp_path: Path) -> None:
    assert run("plan", "--config-dir", str(user_dir), "study=my_study", cwd=tmp_path).returncode == 0
    typo = run("plan", f"--config-dir={user_dir}", "study=my_stuyd", cwd=tmp_path)
    assert typo.returncode == 2 and typo.stderr.count("\n") == 1 and "Did you mean 'my_study'?" in typo.stderr
    arm = run("plan", "study=my_study", "arm@arms.mine=my_referense", cwd=tmp_path,
              env={"ORCHESTRATOR_CONFIG_PATH": str(user_dir)})
    assert arm.returncode == 2 and f"in {user_dir}/study/my_study.yaml" in arm.stderr
    assert "Did you mean 'my_reference'?" in arm.stderr
    (user_dir / "protocol").mkdir()
    (user_dir / "protocol" / "smoke.yaml").write_text("name: smoke\n")  # would be hidden by the project's
    shadow = run("plan", "--config-dir", str(user_dir), "study=my_study", cwd=tmp_path)
    assert shadow.returncode == 2 and "rename yours" in shadow.stderr


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_a_users_study_runs_and_a_colleague_reruns_and_reproduces_it_elsewhere(user_dir: Path,
                                                                               tmp_path: Path) -> None:
    mine = tmp_path / "my-cwd"
    mine.mkdir()
    first = run("run", "--config-dir", str(user_dir), "study=my_study", *QUICK, "hydra.run.dir=sent", cwd=mine)
    assert first.returncode == 0, first.stderr[-2000:]
    prompts = json.loads((mine / "sent" / "prompts.json").read_text())
    assert prompts["hello"]["text"] == "Hello from a file of my own,"
    [kept] = json.loads((mine / "sent" / "run.json").read_text())["config_dirs"]
    assert kept["dir"] == str(user_dir) and set(kept["sha256"]) >= {"study/my_study.yaml", "prompts/hello.txt"}
    assert (mine / "sent" / kept["copy"] / "arm" / "my_reference.yaml").read_text() == ARM
    # The colleague has only the run dir, somewhere else, and no config dir of ours.
    colleague = tmp_path / "colleague"
    shutil.copytree(mine / "sent", colleague / "received")
    shutil.rmtree(user_dir)
    (colleague / "cwd").mkdir()
    rerun = run("run", "--from", "../received", "--out", "../rerun", cwd=colleague / "cwd")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    report = json.loads((colleague / "rerun" / "report.json").read_text())
    assert report["study"] == "my_study" and {c["arm"] for c in report["cells"]} == {"mine", "base"}
    hydra_style = run("run", "--config-dir", "../received/.hydra", "--config-name", "config",
                      "hydra.run.dir=../hydra-style", cwd=colleague / "cwd")  # Hydra's recipe, where Hydra says
    assert hydra_style.returncode == 0 and "running the study recorded in" in hydra_style.stderr
    assert (colleague / "hydra-style" / "report.json").is_file()
    again = run("reproduce", "../received", "--out", "../repro", cwd=colleague / "cwd")
    assert again.returncode == 0 and "verdict: reproduced" in again.stdout, again.stdout + again.stderr


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_a_sweep_over_a_users_study_runs_every_job_and_exits_with_the_worst(user_dir: Path, tmp_path: Path) -> None:
    sweep = run("run", "-m", "--config-dir", str(user_dir), "study=my_study",
                "arms.mine.engine_args.max-num-seqs=range(2,5,2)", "+protocol.request.extra.seed=soon,1", *QUICK,
                "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert sweep.returncode == 4, sweep.stderr[-2000:]  # the jobs with seed=soon got no answer
    jobs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if (p / "run.json").is_file())
    assert jobs == ["0", "1", "2", "3"]  # every job ran, also after a failed one
    assert (tmp_path / "sweep" / "2" / "report.json").is_file()


def test_a_process_run_reproduces_by_code_identity_and_refuses_other_code(tmp_path: Path) -> None:
    source = tmp_path / "refengine"
    shutil.copytree(ROOT / "arms" / "reference-engine" / "refengine", source,
                    ignore=shutil.ignore_patterns("__pycache__"))
    common = ["runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch", *QUICK,
              f"arms.baseline.build.context={source}",
              f"arms.baseline.env.PYTHONPATH={tmp_path}"]  # the engine runs from the copy
    state = {"ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")}
    first = run("run", *common, "hydra.run.dir=original", cwd=tmp_path, env=state)
    assert first.returncode == 0, first.stderr[-2000:]
    same = run("reproduce", "original", "--out", "same", cwd=tmp_path, env=state)
    assert same.returncode == 0 and "verdict: reproduced" in same.stdout, same.stdout + same.stderr[-2000:]
    (source / "engine.py").write_text((source / "engine.py").read_text() + "\n# changed\n")
    other = run("reproduce", "original", "--out", "other", cwd=tmp_path, env=state)
    assert other.returncode == 4, other.stderr[-2000:]  # could not run: not the code that ran
    assert "is not what is installed here" in other.stderr and other.stderr.count("\n") == 1
    # The recorded arm lost its command: the config no longer validates, so nothing re-runs (never "differs").
    saved = tmp_path / "original" / ".hydra" / "config.yaml"
    recorded = yaml.safe_load(saved.read_text())
    recorded["arms"]["baseline"]["was_command"] = recorded["arms"]["baseline"].pop("command")
    saved.write_text(yaml.safe_dump(recorded))
    lost = run("reproduce", "original", "--out", "lost", cwd=tmp_path, env=state)
    assert lost.returncode == 2, lost.stdout + lost.stderr[-2000:]
    assert lost.stderr.count("\n") == 1 and "original/.hydra/config.yaml: unknown key 'was_command'" in lost.stderr
    del recorded["arms"]["baseline"]["was_command"]  # the schema's default: []
    saved.write_text(yaml.safe_dump(recorded))
    emptied = run("reproduce", "original", "--out", "lost", cwd=tmp_path, env=state)
    assert emptied.returncode == 2 and "differs" not in emptied.stdout, emptied.stdout + emptied.stderr[-2000:]
    assert "original/.hydra/config.yaml: arms.baseline.command=[]: must be a full argv" in emptied.stderr
    assert not (tmp_path / "lost").exists()


OWN_SERVER_ARM = """# My own OpenAI-compatible server: a script of mine, run by a python3 with no engine installed.
engine: openai  # nothing assumed: no knob listing, no vLLM request fields; what it offers is said here
description: my own server
image: process
build:
  context: ../server  # beside this folder: its code is hashed into the arm's id
command: [python3, {server}]
served_model_name: mine
metrics_path: null  # it serves none: co-residency is not observable
"""


def _own_server_dir(tmp_path: Path, arm: str) -> Path:
    root = tmp_path / "my-configs"
    (root / "arm").mkdir(parents=True)
    (root / "server").mkdir()
    shutil.copy(ROOT / "tests" / "own_server.py", root / "server" / "own_server.py")
    (root / "arm" / "my_server.yaml").write_text(arm.format(server=root / "server" / "own_server.py"))
    return root


def test_a_users_own_server_runs_as_an_openai_arm_with_nothing_assumed(tmp_path: Path) -> None:
    user_dir = _own_server_dir(tmp_path, OWN_SERVER_ARM)
    args = ["--config-dir", str(user_dir), "runtime=process", "arm@arms.baseline=my_server", "~arms.wide_batch",
            "protocol=smoke", *QUICK]
    state = {"ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")}
    result = run("run", *args, "hydra.run.dir=run", cwd=tmp_path, env=state)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "**No difference observed**" in (tmp_path / "run" / "report.md").read_text()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["cells"] and all(c["distinct_signatures"] == 1 and c["errors"] == 0 for c in report["cells"])
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "run" / "data" / "responses").to_pylist()
    assert rows and all(r["http_status"] == 200 for r in rows)  # the strict server: no field it does not know
    assert not any("return_token_ids" in r["request_json"] for r in rows)
    [arm] = pq.read_table(tmp_path / "run" / "data" / "arms").to_pylist()
    packages = json.loads(arm["fingerprint_json"])["probe"]["packages"]
    assert "vllm" not in packages and "transformers" not in packages  # no engine where it ran
    assert arm["image_id"].startswith("process:sha256:")
    knobs = json.loads((tmp_path / "run" / "guard.json").read_text())["knobs"]["baseline"]
    assert not knobs["checked"] and "engine openai ships no listing" in knobs["reason"]


def test_a_script_arm_that_names_no_engine_is_not_refused_and_told_how_to_declare_it(tmp_path: Path) -> None:
    """No `engine:` is vLLM's profile: its listing cannot import vllm where the script runs, which refuses an arm
    that runs `-m vllm...` (tests/unit/test_guard.py) but not a script, which may need no vllm at all."""
    user_dir = _own_server_dir(tmp_path, OWN_SERVER_ARM.replace("engine: openai", "# engine: openai"))
    result = run("check", "--config-dir", str(user_dir), "runtime=process", "arm@arms.baseline=my_server",
                 "~arms.wide_batch", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "has no module" not in result.stderr
    assert "runs no module or program of engine vllm, and its listing needs module 'vllm': declare a server of " \
           "your own with arms.baseline.engine=openai" in result.stdout, result.stdout
    # `run` says it up front too: under vLLM's profile every request carries vLLM's fields, which this strict
    # server refuses (HTTP 400), so the run fails as a measurement, with the fix already on the terminal.
    result = run("run", "--config-dir", str(user_dir), "runtime=process", "arm@arms.baseline=my_server",
                 "~arms.wide_batch", "protocol=smoke", *QUICK, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
                 env={"ORCHESTRATOR_PROCESS_DIR": str(tmp_path / "state")})
    assert result.returncode == 4, result.stderr[-3000:]
    assert "warning: arm 'baseline': `python3 " in result.stderr
    assert "declare a server of your own with arms.baseline.engine=openai" in result.stderr.split("[baseline]")[0]
