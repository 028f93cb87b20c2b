"""The GEMM probe shipped into the reference-engine image through the runner: two containers with the
same seed, no network, removed afterwards; the probes Parquet table and report come back."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def test_probe_in_the_reference_image(tmp_path: Path) -> None:
    result = orchestrator("probe", "--preset", "cpu_small", "--arm", "reference", "--out", str(tmp_path),
                          "--set", "shapes={tiny: [256, 256]}", "--set", "m=[1, 2, 8]", "--set", "repeats=4",
                          timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(tmp_path / "data" / "probes").to_pylist()
    arms = {"bf16", "fp32", "fp8_tensor", "fp8_rowwise", "fp8_block", "fp8_block_ue8m0", "fp8_block_rowmajor"}
    assert {r["arm"] for r in rows} == arms and {r["process"] for r in rows} == {1, 2}
    assert all(r["image"] == "orchestrator/reference-engine:0.1.0" and r["torch"] for r in rows)
    for row in rows:
        assert row["unsupported"] is None and row["distinct_digests"] == 1 and row["processes_agree"], row
        assert row["flagged"] == row["negative_control"], row
    assert any(r["row0_bits_equal_m1"] is False for r in rows if r["arm"] == "fp32")
    assert "## Kernel probes" in (tmp_path / "probes.md").read_text()
