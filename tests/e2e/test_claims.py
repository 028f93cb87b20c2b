"""`orchestrator claims` from the user's side, on the reference engine as local processes (runtime=process): the
shipped claims file (conf/claims/reference.yaml) about its batch-shape mechanism, run from another working
directory: the false claim contradicted (exit 3), the true ones replicated, each with its power, the underpowered
one inconclusive with the n that settles it; then the same claims on the run dir it made, nothing run again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

CLAIMS = ROOT / "conf" / "claims" / "reference.yaml"
PROCESS = ["runtime=process", "arm@arms.invariant=reference_process", "arm@arms.variant=reference_process",
           '+arms.variant.env.VLLM_BATCH_INVARIANT="0"']
TRUE = {"mechanism on: a batch over capacity diverges", "mechanism off: a batch over capacity gives n identical "
        "answers", "mechanism on, one request at a time: 1 in 6 distinct", "mechanism on: does not crash",
        "mechanism on against off: over capacity, B diverges at least 10 points more",
        "mechanism off: no top-1 flip over capacity"}
FALSE = "mechanism on: no divergence"
UNDERPOWERED = "mechanism off, one at a time: under 1 % diverge"


def claims(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """As a user runs it, from their own folder (the checkout on PYTHONPATH, as an installed package would be)."""
    env = {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(cwd / "state"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "orchestrator", "claims", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env)


def verdicts(page: Path) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(page.read_text())["claims"]}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    cwd = tmp_path_factory.mktemp("user")
    return cwd, claims(cwd, str(CLAIMS), *PROCESS)


def test_the_false_claim_is_contradicted_and_the_true_ones_replicated(
        checked: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, result = checked
    assert result.returncode == 3, result.stderr[-3000:]
    out = cwd / "claims" / "reference"  # the default: ./claims/FILE_STEM
    assert (out / "run-1" / "run.json").is_file() and "ran " in result.stderr
    found = verdicts(out / "claims.json")
    assert {name for name, c in found.items() if c["verdict"] == "replicated"} == TRUE
    false = found[FALSE]
    assert false["verdict"] == "contradicted" and false["lower"] > 0  # the interval that excludes "at most 0"
    assert all(found[name]["power"] >= 0.8 for name in (*TRUE, FALSE))  # each sized to be contradicted if false
    assert all(found[name]["n"] >= found[name]["n_needed"] for name in (*TRUE, FALSE))
    under = found[UNDERPOWERED]  # max_n (100) short of the 299 its margin needs
    assert (under["verdict"], under["n"], under["n_needed"]) == ("inconclusive", 100, 299)
    assert under["power"] < 0.8
    assert result.stdout.startswith("1 of 8 claims contradicted, 6 replicated, 1 inconclusive.")
    assert "n = 299 would settle it" in result.stdout
    assert (out / "claims.md").read_text().splitlines()[2].startswith("**1 of 8 claims contradicted")
    assert (out / "claims.html").is_file()


def test_claims_on_the_run_dir_alone_give_the_same_verdicts(
        checked: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, _ = checked
    run_dir = cwd / "claims" / "reference" / "run-1"
    again = claims(cwd, str(CLAIMS), "--run", str(run_dir), "--out", str(cwd / "again"))
    assert again.returncode == 3, again.stderr[-3000:]
    assert {k: v["verdict"] for k, v in verdicts(cwd / "again" / "claims.json").items()} == \
        {k: v["verdict"] for k, v in verdicts(cwd / "claims" / "reference" / "claims.json").items()}
    assert not (cwd / "again" / "run-1").exists()
    # with the study named too: the run dir holds what each claim needs (up to max_n), so nothing is run
    both = claims(cwd, str(CLAIMS), "--study", "batch_invariance", "--run", str(run_dir), "--out",
                  str(cwd / "both"), *PROCESS)
    assert both.returncode == 3 and "nothing run" in both.stderr, both.stderr[-3000:]
    assert not (cwd / "both" / "run-1").exists()


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_the_shipped_claims_on_docker(tmp_path: Path) -> None:
    """As the claims file's header says to run it: the reference engine's image, the study it names."""
    result = claims(tmp_path, str(CLAIMS))
    assert result.returncode == 3, result.stderr[-3000:]
    found = verdicts(tmp_path / "claims" / "reference" / "claims.json")
    assert {name for name, c in found.items() if c["verdict"] == "replicated"} == TRUE
    assert found[FALSE]["verdict"] == "contradicted" and found[UNDERPOWERED]["verdict"] == "inconclusive"
    arms = json.loads((tmp_path / "claims" / "reference" / "run-1" / "report.json").read_text())["arms"]
    assert all(arm["image_id"].startswith("sha256:") for arm in arms)  # containers, not processes
