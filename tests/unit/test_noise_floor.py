"""study.noise_floor: the baseline started twice (A/A), its own caches, no variable, and every A/B read next
to the A/A of the same prompt and phase."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.analysis.compare import compare
from orchestrator.config.schema import ScratchConfig
from orchestrator.errors import ConfigError
from orchestrator.guard import declared
from orchestrator.record.paths import RunPaths
from orchestrator.report.headline import sentences
from orchestrator.run.study import StudyRunner
from tests.fake_engine import fake_runtime


def test_the_baseline_is_copied_right_after_itself_with_no_variable_and_its_own_caches() -> None:
    typed = config.to_typed(config.compose(["study=noise_floor"]))
    assert list(typed.arms) == ["baseline", "baseline_aa", "wide_batch"]
    assert typed.study.variables["baseline_aa"] == []
    twin, baseline = typed.arms["baseline_aa"], typed.arms["baseline"]
    assert twin.engine_args == baseline.engine_args and twin.image == baseline.image
    assert declared.problems(typed) == []  # the guard passes it as "changes nothing"
    assert config.to_typed(config.compose(["study.noise_floor=false"])).arms.keys() == {"baseline", "wide_batch"}


def test_a_shared_scratch_dir_is_not_shared_with_the_copy() -> None:
    composed = config.compose(["study=noise_floor", "study.noise_floor=false"])
    typed = config.to_typed(composed)
    typed.arms["baseline"].scratch["tune"] = ScratchConfig(container="/tune", share="t")
    typed.study.noise_floor = True
    config.noise_floor.add_copy(typed)
    assert typed.arms["baseline_aa"].scratch["tune"].share is None
    assert typed.arms["baseline"].scratch["tune"].share == "t"


def test_a_name_taken_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match="adds the arm 'baseline_aa'"):
        config.to_typed(config.compose(["study=noise_floor", "+arm@arms.baseline_aa=reference"]))


@pytest.mark.parametrize(("noisy", "said"), [
    (["wide_batch"], "beyond the noise floor in 4 of 4 differing cells"),
    (["baseline_aa", "wide_batch"], "within the noise floor: the A/A differs in all 4 of the differing cells too"),
    # every arm noisy, the same signatures with the same counts in every start (as transformers serve's
    # continuous batching on the H200): one distribution, not 'differ'
    (["baseline", "baseline_aa", "wide_batch"], "same distribution for 4 of 4 prompt x phase cells"),
])
def test_each_ab_is_read_against_the_aa(tmp_path: Path, noisy: list[str], said: str) -> None:
    typed = config.to_typed(config.compose(["study=noise_floor", "protocol=smoke"]))
    for name, arm in typed.arms.items():
        arm.image, arm.build.context = ("fake-noisy" if name in noisy else "fake-engine"), None
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-aa", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    lines = sentences(compare([paths], "baseline"), [], 0.01)
    [aa] = [line for line in lines if line.startswith("A/A baseline_aa vs baseline")]
    assert ("identical for 4 of 4" in aa) == ("baseline_aa" not in noisy)
    assert ("differ for" in aa) == (noisy == ["baseline_aa", "wide_batch"])
    [ab] = [line for line in lines if line.startswith("A/B wide_batch vs baseline")]
    assert said in ab
