"""The GEMM probe shipped into the reference-engine image through the runner: two containers with the
same seed, no network, removed afterwards; the probes Parquet table and report come back. And attribution
for a process arm: the probe runs under the arm's interpreter with the arm's code identity, and a study of
process arms names candidate ops by that identity (a probe of other code is not matched)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

Test = TypeVar("Test", bound=Callable[..., None])


def docker(test: Test) -> Test:
    """A test that runs containers: needs the Docker host, and leaves none behind."""
    for mark in (pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")):
        mark(test)  # marks the function itself
    return test


# A small GEMM grid where the fp32 arm's row 0 changes with M on the CPU: a batch-variant op to name
SMALL_GEMM = ["--preset", "cpu_small", "--set", "arms=[fp32, bf16]", "--set", "shapes={tiny: [256, 256]}",
              "--set", "m=[1, 2, 8]", "--set", "processes=1"]


@docker
def test_probe_in_the_reference_image(tmp_path: Path) -> None:
    result = orchestrator("probe", "--preset", "cpu_small", "--arm", "reference", "--out", str(tmp_path),
                          "--set", "shapes={tiny: [256, 256]}", "--set", "m=[1, 2, 8]", "--set", "repeats=4",
                          timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(tmp_path / "data" / "probes").to_pylist()
    arms = {"bf16", "fp32", "fp8_tensor", "fp8_rowwise", "fp8_block", "fp8_block_ue8m0", "fp8_block_rowmajor"}
    assert {r["arm"] for r in rows} == arms and {r["process"] for r in rows} == {1, 2}
    assert all(r["image"] == "orchestrator/reference-engine:0.1.0" and r["torch"] for r in rows)
    assert len({r["image_id"] for r in rows}) == 1 and rows[0]["image_id"].startswith("sha256:")  # what ran
    for row in rows:
        assert row["unsupported"] is None and row["distinct_digests"] == 1 and row["processes_agree"], row
        assert row["flagged"] == row["negative_control"], row
    assert any(r["row0_bits_equal_m1"] is False for r in rows if r["arm"] == "fp32")
    assert "## Kernel probes" in (tmp_path / "probes.md").read_text()


@docker
def test_ops_preset_in_the_reference_image(tmp_path: Path) -> None:
    result = orchestrator("probe", "--preset", "ops_cpu_small", "--arm", "reference", "--out", str(tmp_path),
                          timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]  # every op the preset expects invariant was
    rows = pq.read_table(tmp_path / "data" / "probes").to_pylist()
    assert {r["op"] for r in rows} == {"decode_attention", "prefill_attention", "rmsnorm", "log_softmax_topk",
                                       "moe_grouped_gemm", "control_must_vary", "control_must_not_vary", "topk_ties"}
    assert all(r["image"] == "orchestrator/reference-engine:0.1.0" and r["process"] in (1, 2) for r in rows)
    assert all(r["distinct_digests"] > 1 for r in rows if r["control"] == "must_vary")
    assert all(r["distinct_digests"] == 1 and r["row0_bits_equal_m1"] for r in rows if r["control"] == "must_not_vary")
    stable = [r for r in rows if r["arm"] == "stable_sort"]  # the tie control: ties to the lowest index, always
    assert stable and all(r["tie_rows"] == -(-r["M"] * 2 // 10) and r["set_differs_alone"] == 0
                          and r["set_differs_repeats"] == 0 for r in stable)
    text = (tmp_path / "probes.md").read_text()
    assert "## Kernel probes (ops)" in text and "### moe_grouped_gemm" in text and "### top-k under ties" in text
    assert (tmp_path / "probes-ops-raw-2.jsonl").is_file()


@docker
def test_an_op_the_image_does_not_have_is_one_line_exit_2_and_no_container_left(tmp_path: Path) -> None:
    result = orchestrator("probe", "--preset", "ops_cpu_small", "--arm", "reference", "--out", str(tmp_path / "o"),
                          "--set", "ops={x: {op: rmsnrm}}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and "op 'rmsnrm' is not one of" in result.stderr
    assert not (tmp_path / "o").exists()


@docker
def test_a_batch_variant_arm_names_the_ops_measured_batch_variant_in_its_image(tmp_path: Path) -> None:
    """The study's batched cells diverge in arm `variant` (batch invariance off) and not in `invariant`; the
    GEMM probe in their image (fp32 on the CPU: row 0 changes with M) is recorded in the run dir, and the
    report names it for `variant` only, as a candidate cause."""
    study = orchestrator("run", f"hydra.run.dir={tmp_path}", "study=batch_invariance")
    assert study.returncode == 0, study.stderr[-3000:]
    assert "Candidate causes" not in (tmp_path / "report.md").read_text()  # no probes recorded yet
    probe = orchestrator("probe", *SMALL_GEMM, "--arm", "reference_batch_variant", "--out", str(tmp_path),
                         timeout_s=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    compare = orchestrator("compare", str(tmp_path))
    assert compare.returncode == 0, compare.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    [line] = [ln for ln in report.splitlines() if ln.startswith("- arm `")]
    assert line.startswith("- arm `variant`: batched phase(s) concurrent, over_capacity diverge"), line
    assert "gemm `tiny` arm fp32 (row 0 changes at M 2,8)" in line and "candidate cause, not proof" in line
    assert "`invariant`" not in report.split("## Candidate causes")[1].split("\n## ")[0]


PROCESS_STUDY = ["study=batch_invariance", "runtime=process", "arm@arms.invariant=reference_process",
                 "arm@arms.variant=reference_process", "+arms.variant.env.VLLM_BATCH_INVARIANT=0",
                 "protocol.phases.sequential.repeats=3", "protocol.phases.concurrent.repeats=4",
                 "protocol.request.max_tokens=8"]
ENGINE = Path(__file__).resolve().parents[2] / "arms" / "reference-engine" / "refengine"


@pytest.fixture(scope="module")
def process_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """batch_invariance with both arms as local processes of the reference engine: `variant` (batch
    invariance off) diverges in its batched phases, `invariant` does not. Their source (build.context, hashed
    into their code identity) is a copy, the same code, that a test may change after the study."""
    base = tmp_path_factory.mktemp("probes")
    source = base / "refengine"
    shutil.copytree(ENGINE, source, ignore=shutil.ignore_patterns("__pycache__"))
    run = orchestrator("run", f"hydra.run.dir={base / 'study'}", *PROCESS_STUDY,
                       *(f"arms.{arm}.build.context={source}" for arm in ("invariant", "variant")),
                       env={**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(base / "state")})
    assert run.returncode == 0, run.stderr[-3000:]
    return base / "study", source


def _probe(study: Path, run_dir: Path, *probe: str) -> subprocess.CompletedProcess[str]:
    shutil.copytree(study, run_dir)
    return orchestrator("probe", *SMALL_GEMM, *probe, "--out", str(run_dir))


def _compare(run_dir: Path) -> str:
    compare = orchestrator("compare", str(run_dir))
    assert compare.returncode == 0, compare.stderr[-3000:]
    return (run_dir / "report.md").read_text()


@pytest.mark.parametrize("arm", [["--arm", "variant"], ["--arm", "reference_process", "--local"]],
                         ids=["the study's arm", "the arm file, as a process"])
def test_a_process_arm_names_the_ops_measured_batch_variant_under_its_own_code(
        process_study: tuple[Path, Path], tmp_path: Path, arm: list[str]) -> None:
    probe = _probe(process_study[0], tmp_path / "run", *arm)
    assert probe.returncode == 0, probe.stderr[-3000:]
    report = _compare(tmp_path / "run")
    arms = {a["arm"]: a["image_id"] for a in pq.read_table(tmp_path / "run" / "data" / "arms").to_pylist()}
    probes = pq.read_table(tmp_path / "run" / "data" / "probes").to_pylist()
    assert arms["variant"].startswith("process:sha256:")  # the identity the run computed ...
    assert {(r["image"], r["image_id"]) for r in probes} == {("process", arms["variant"])}  # ... the probe's
    [line] = [ln for ln in report.splitlines() if ln.startswith("- arm `")]
    assert line.startswith("- arm `variant`: batched phase(s) concurrent, over_capacity diverge"), line
    assert f"Measured batch-variant in its code {arms['variant'][:27]}: gemm `tiny` arm fp32 (row 0 changes " \
           "at M 2,8)" in line
    shown = orchestrator("show", str(tmp_path / "run"))
    assert shown.returncode == 0 and "candidate causes (kernel probes):\n- arm `variant`" in shown.stdout


def test_a_probe_of_other_code_is_not_matched_to_a_process_arm(process_study: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    """The same interpreter without the engine's source (`--local` alone): another identity, no candidate."""
    probe = _probe(process_study[0], tmp_path / "run", "--local")
    assert probe.returncode == 0, probe.stderr[-3000:]
    report = _compare(tmp_path / "run")
    arms = {a["image_id"] for a in pq.read_table(tmp_path / "run" / "data" / "arms").to_pylist()}
    probes = {r["image_id"] for r in pq.read_table(tmp_path / "run" / "data" / "probes").to_pylist()}
    assert len(probes) == 1 and probes.isdisjoint(arms) and next(iter(probes)).startswith("process:sha256:")
    assert "Candidate causes" not in report


def test_a_study_arm_whose_code_changed_since_is_not_probed(process_study: tuple[Path, Path], tmp_path: Path) -> None:
    """Its source edited after the study: the probe would measure other code; it says so (exit 4), records
    nothing."""
    study, source = process_study
    engine = source / "__init__.py"
    original = engine.read_text()
    try:
        engine.write_text(original + "\n# edited after the study\n")
        probe = _probe(study, tmp_path / "run", "--arm", "variant")
    finally:
        engine.write_text(original)
    assert probe.returncode == 4, probe.stderr[-3000:]
    assert "arm 'variant' of the study ran process:sha256:" in probe.stderr and "would measure other code" \
        in probe.stderr and probe.stderr.count("\n") == 1
    assert not list((tmp_path / "run" / "data" / "probes").glob("*.parquet"))
