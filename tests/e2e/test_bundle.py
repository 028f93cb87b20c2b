"""A bundle handed on (docs/bundle.md): a run made through the process runtime, bundled, the run dir gone and the
bundle moved to a fresh folder; from another working directory with no config dirs of the user's on the search
path, `compare BUNDLE`, `run --from BUNDLE` and `reproduce BUNDLE` work, so do the verbs that read a run (show,
matrix, claims --run, triage --from, locate), and a corrupted bundle is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT

QUICK = ["runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
         "protocol.phases.sequential.repeats=3", "protocol.phases.concurrent.repeats=3",
         "protocol.phases.concurrent.batches=1", "protocol.request.max_tokens=8"]


def _orchestrator(cwd: Path, base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m orchestrator ARGS` from `cwd`, as a newcomer would run it: the checkout's code, no config dir of
    theirs (ORCHESTRATOR_CONFIG_PATH unset), a cache and process state of the test's own."""
    env = {key: value for key, value in os.environ.items() if key != "ORCHESTRATOR_CONFIG_PATH"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               ORCHESTRATOR_CACHE_DIR=str(base / "cache"), ORCHESTRATOR_PROCESS_DIR=str(base / "state"))
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the bundle, moved into a fresh folder with the run dir removed; the folder the verbs run from)."""
    base = tmp_path_factory.mktemp("bundle")
    made = _orchestrator(ROOT, base, "run", f"hydra.run.dir={base / 'run'}", *QUICK)
    assert made.returncode == 0, made.stderr[-3000:]
    bundled = _orchestrator(base, base, "bundle", str(base / "run"), "--out", str(base / "run.zip"))
    assert bundled.returncode == 0, bundled.stderr[-3000:]
    assert bundled.stdout.startswith(f"Bundle: {base / 'run.zip'} (")
    (base / "fresh").mkdir()
    moved = Path(shutil.move(base / "run.zip", base / "fresh" / "received.zip"))
    shutil.rmtree(base / "run")
    (base / "elsewhere").mkdir()
    return moved, base / "elsewhere"


def test_the_bundle_holds_the_process_arms_code_and_the_exact_commands(sent: tuple[Path, Path]) -> None:
    bundle, _ = sent
    with zipfile.ZipFile(bundle) as zipped:
        names = set(zipped.namelist())
        about = json.loads(zipped.read("run/bundle/bundle.json"))
    assert {"run/bundle/contexts/baseline/server.py", "run/.hydra/config.yaml", "run/prompts.json",
            "run/bundle/MANIFEST.sha256"} <= names
    assert any(name.startswith("run/data/responses/") for name in names)
    arm = about["arms"]["baseline"]
    assert arm["identity"].startswith("process:sha256:") and arm["command"].startswith("env PYTHONPATH=")
    assert arm["context"]["recorded"] == str(ROOT / "arms" / "reference-engine" / "refengine")
    assert about["commands"]["original"].startswith("orchestrator run ") and "runtime=process" in about["commands"][
        "original"]


def test_compare_run_from_and_reproduce_take_the_bundle_elsewhere(sent: tuple[Path, Path]) -> None:
    bundle, elsewhere = sent
    base = elsewhere.parent
    compared = _orchestrator(elsewhere, base, "compare", str(bundle))
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "| baseline | capital | sequential | 3 | 1 in 3 |" in compared.stdout
    assert f"Report: {base / 'cache' / 'bundles'}" in compared.stdout
    rerun = _orchestrator(elsewhere, base, "run", "--from", str(bundle), "--out", "rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    arms = pq.read_table(elsewhere / "rerun" / "data" / "arms").to_pylist()
    assert json.loads(arms[0]["config_json"])["build"]["context"].endswith("/run/bundle/contexts/baseline")
    assert json.loads((elsewhere / "rerun" / "run.json").read_text())["from"] == str(bundle)
    reproduced = _orchestrator(elsewhere, base, "reproduce", str(bundle))
    assert reproduced.returncode == 0, reproduced.stderr[-3000:]
    assert "verdict: reproduced (4 cells)" in reproduced.stdout
    beside = [p.name for p in bundle.parent.iterdir() if p.name.startswith("run-reproduce-")]
    assert len(beside) == 1  # written beside the bundle, not into the cache


def test_the_reading_verbs_take_the_bundle_too(sent: tuple[Path, Path]) -> None:
    """show, matrix, claims --run, triage --from and locate: before, each wanted the folder compare unpacked."""
    bundle, elsewhere = sent
    base = elsewhere.parent
    shown = _orchestrator(elsewhere, base, "show", str(bundle))
    assert shown.returncode == 0 and "baseline" in shown.stdout, shown.stderr[-3000:]
    merged = _orchestrator(elsewhere, base, "matrix", str(bundle), "--out", "matrix")
    assert merged.returncode == 0 and merged.stdout.startswith("2 cells, "), merged.stderr[-3000:]
    claims = elsewhere / "claims.yaml"
    claims.write_text("claims:\n  - {name: never, kind: no_crash, arm: baseline}\n")
    checked = _orchestrator(elsewhere, base, "claims", str(claims), "--run", str(bundle))
    assert checked.returncode == 0 and "never" in checked.stdout, checked.stderr[-3000:]
    planned = _orchestrator(elsewhere, base, "triage", "--from", str(bundle), "--plan")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert planned.stdout.startswith("triage of arm 'baseline' (reference): ")
    located = _orchestrator(elsewhere, base, "locate", str(bundle), "--cell", "baseline/capital/concurrent")
    assert located.returncode == 2 and "has no digests for cell baseline/capital/concurrent" in located.stderr


def test_a_corrupted_bundle_is_refused_in_one_line(sent: tuple[Path, Path]) -> None:
    bundle, elsewhere = sent
    corrupted = elsewhere / "corrupted.zip"
    with zipfile.ZipFile(bundle) as good, zipfile.ZipFile(corrupted, "w") as bad:
        for name in good.namelist():
            data = good.read(name)
            bad.writestr(name, data.replace(b"capital", b"Capital") if name == "run/prompts.json" else data)
    for verb in (["compare"], ["run", "--from"], ["reproduce"]):
        refused = _orchestrator(elsewhere, elsewhere.parent, *verb, str(corrupted))
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.strip().splitlines() == [
            f"error: {corrupted}: member 'run/prompts.json' fails its checksum (sha256 "
            + refused.stderr.split("(sha256 ", 1)[1].strip()]
        assert "the bundle is damaged; copy it again from its source" in refused.stderr


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_a_docker_arms_patch_travels_and_reproduce_pins_the_image(tmp_path: Path) -> None:
    """The seed's fused-finalize A/B with the reference engine's image standing in for vLLM's: the non-fused arm's
    build context (its Dockerfile and patch_fused_finalize.py) goes in the bundle; `reproduce BUNDLE` elsewhere
    pins the image id the run used, and `run --from BUNDLE` names the bundled context as the arm's build context."""
    made = _orchestrator(ROOT, tmp_path, "run", "study=vllm_fused_finalize",
                         "stand_in=orchestrator/reference-engine:0.1.0", f"hydra.run.dir={tmp_path / 'run'}",
                         "protocol.request.max_tokens=4", "protocol.phases.sequential.repeats=3")
    assert made.returncode == 0, made.stderr[-3000:]
    (tmp_path / "fresh").mkdir()
    bundle = tmp_path / "fresh" / "ab.zip"
    bundled = _orchestrator(tmp_path, tmp_path, "bundle", "run", "--out", str(bundle))
    assert bundled.returncode == 0, bundled.stderr[-3000:]
    assert "arm 'nonfused': build context " in bundled.stderr and "(2 files)" in bundled.stderr
    image_id = pq.read_table(tmp_path / "run" / "data" / "arms").column("image_id")[0].as_py()
    shutil.rmtree(tmp_path / "run")
    with zipfile.ZipFile(bundle) as zipped:
        patch = zipped.read("run/bundle/contexts/nonfused/patch_fused_finalize.py")
        assert "run/bundle/contexts/nonfused/Dockerfile" in zipped.namelist()
    assert patch == (ROOT / "arms" / "vllm-nonfused" / "patch_fused_finalize.py").read_bytes()
    (tmp_path / "elsewhere").mkdir()
    reproduced = _orchestrator(tmp_path / "elsewhere", tmp_path, "reproduce", str(bundle), "--out", "again")
    assert reproduced.returncode == 0, reproduced.stderr[-3000:]
    assert "verdict: reproduced (4 cells)" in reproduced.stdout
    again = pq.read_table(tmp_path / "elsewhere" / "again" / "data" / "arms").to_pylist()
    assert {arm["image_ref"] for arm in again} == {image_id}  # pinned by id, as reproduce does
    rerun = _orchestrator(tmp_path / "elsewhere", tmp_path, "run", "--from", str(bundle), "--out", "rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    arms = {arm["arm"]: json.loads(arm["config_json"]) for arm in
            pq.read_table(tmp_path / "elsewhere" / "rerun" / "data" / "arms").to_pylist()}
    context = Path(arms["nonfused"]["build"]["context"])
    assert context.is_relative_to(tmp_path / "cache") and (context / "patch_fused_finalize.py").read_bytes() == patch
