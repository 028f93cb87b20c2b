"""`compare SWEEP_DIR` is gated like a sweep's run: the gate asked for is applied to each job, and the worst
job's status wins (docs/conventions.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from tests.recorded import noisy_study_run


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two jobs of the recorded study, whose noisy arm diverges in every cell."""
    root = tmp_path_factory.mktemp("sweep")
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for job in ("0", "1"):
        noisy_study_run(root / job, f"sweep-{job}")
    return root


def test_a_sweep_without_a_gate_passes_and_with_one_fails_like_its_jobs(sweep_dir: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(sweep_dir)]) == 0
    assert main(["compare", str(sweep_dir), "--max-divergence-rate", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", str(sweep_dir), "--max-divergence-rate", "0"]) == 3
    said = capsys.readouterr()
    assert said.out.count("\nReport: ") == 2 and "Sweep report:" in said.out  # each job's, then the sweep's
    assert said.err.count("gate") >= 2, said.err[-2000:]


def test_a_sweep_takes_no_out_or_baseline(sweep_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(sweep_dir), "--baseline", "0/baseline"]) == 2
    assert "is a sweep: compare takes no --out or --baseline for it" in capsys.readouterr().err
