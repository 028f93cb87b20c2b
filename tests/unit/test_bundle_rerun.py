"""A bundle taken again (docs/bundle.md, "Taking one"): arms that shared one build context in the run share
one bundled context when it re-runs, so the single-variable guard sees no difference the run did not have."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator import config
from orchestrator.config.schema import ArmConfig
from orchestrator.guard.declared import problems
from orchestrator.record.paths import RunPaths
from orchestrator.reproduce.bundle import bundle, opened
from orchestrator.reproduce.rerun import load_config
from tests.recorded import noisy_study_run


def test_arms_sharing_one_context_share_its_bundled_copy_and_pass_the_guard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "engine-src"
    source.mkdir()
    (source / "server.py").write_text("print('serve')\n")

    def shared(arm: ArmConfig) -> None:
        arm.build.context = str(source)

    paths = noisy_study_run(tmp_path / "run", "r1", arm_config=shared)
    composed = config.compose(["protocol=smoke"])  # the default study: wide_batch differs in max-num-seqs only
    for arm in composed.arms.values():
        arm.build.context = str(source)
    paths.hydra.mkdir(parents=True)
    OmegaConf.save(composed, paths.hydra / "config.yaml")
    assert bundle(paths.root, tmp_path / "run.zip").status == 0
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    unpacked = RunPaths(opened(tmp_path / "run.zip")[0])
    typed = load_config(unpacked, [], "--allow {kind}")
    contexts = {arm.build.context for arm in typed.arms.values()}
    assert len(contexts) == 1 and Path(contexts.pop()).is_relative_to(unpacked.bundle)
    assert problems(typed) == []  # before: "build.context (.../contexts/baseline -> .../wide_batch) [NOT declared]"
