"""Each arm is resolved once (config/arms.py `resolve_arms`): the stand-in applied, the engine that answers,
the request fields, interpreter and build spec; every stage takes that value and none re-derives it."""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.config import arms as config_arms
from orchestrator.config.arms import resolve_arms
from orchestrator.config.schema import Config
from orchestrator.engines import profile_for
from orchestrator.guard.fingerprint import matrix_material
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.run.study import StudyRunner
from tests.fake_engine import fake_runtime

ORCHESTRATOR = Path(config.__file__).parents[1]
STAND_IN = "orchestrator/ref:1"


def load(*overrides: str) -> Config:
    return config.to_typed(config.compose(list(overrides)))


def test_a_stand_in_arm_is_answered_by_the_reference_engine_and_sent_what_its_own_engine_would_be() -> None:
    stood = resolve_arms(load("study=vllm_fused_finalize", f"stand_in={STAND_IN}"))
    plain = resolve_arms(load("study=vllm_fused_finalize"))
    for name, arm in stood.items():
        assert arm.declared.engine == "vllm" and plain[name].profile is profile_for("vllm")
        assert arm.profile is profile_for("reference")  # the engine that answers: its version in the matrix key
        assert arm.arm.image == STAND_IN and arm.arm.gpus is None and arm.declared.image != STAND_IN
        assert arm.request_extra == plain[name].request_extra == profile_for("vllm").extra({})  # what is sent
        assert arm.stand_in_image == STAND_IN and plain[name].stand_in_image is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        stood["fused"].identity = "sha256:1"  # type: ignore[misc]
    assert dataclasses.replace(stood["fused"], identity="sha256:1").identity == "sha256:1"


def test_a_stand_in_run_records_the_reference_engine_in_its_cell_and_keeps_the_arm_as_declared(tmp_path: Path
                                                                                               ) -> None:
    typed = load("protocol=smoke")
    for arm in typed.arms.values():
        arm.build.context = None
    typed.stand_in = "fake-engine"
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "run-stood", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    assert runner.failed == []
    for row in read_table(paths, "arms").to_pylist():
        fingerprint = json.loads(row["fingerprint_json"])
        assert fingerprint["cell"]["engine"] == "reference" and row["image_ref"] == "fake-engine"
        assert json.loads(row["config_json"])["image"] == typed.arms[row["arm"]].image  # as the study wrote it
        probe = {"packages": {"refengine": "0.3", "vllm": "0.11", "torch": "2.8"}}
        material = matrix_material(row["image_id"], {**fingerprint, "probe": probe})
        assert material["packages"] == {"refengine": "0.3", "torch": "2.8"}  # the engine that answered


def _modules_where(found: Callable[[ast.AST], bool]) -> set[str]:
    """Modules of the orchestrator with a node `found` says yes to."""
    return {path.relative_to(ORCHESTRATOR.parent).as_posix() for path in ORCHESTRATOR.rglob("*.py")
            if any(found(node) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))}


def _attribute_reads(name: str) -> set[str]:
    return _modules_where(lambda node: isinstance(node, ast.Attribute) and node.attr == name
                          and isinstance(node.ctx, ast.Load))


def _calls(name: str) -> set[str]:
    return _modules_where(lambda node: isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == name)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == name)))


def test_no_module_re_derives_an_arm() -> None:
    assert not hasattr(config_arms, "effective_arm")
    # The stand-in is applied in one place; guard/results.py reads its own record field, and a reproduce pins a
    # recorded stand-in's image id into the config before that config is resolved.
    assert _attribute_reads("stand_in") == {"orchestrator/config/arms.py", "orchestrator/guard/results.py",
                                            "orchestrator/reproduce/rerun.py"}
    # The build spec and the interpreter are the resolution's; the knob listing's command is made from an arm
    # config by callers that hold one (its tests), so it asks the same function the resolution does.
    assert _calls("build_spec") == {"orchestrator/config/arms.py"}
    assert _calls("arm_interpreter") == {"orchestrator/config/arms.py", "orchestrator/guard/knobs.py"}
