"""What `check` and `plan` refuse about digests, one line and exit 2 (config/engine_rules.py, run/send/digests.py
`capacity_problems`): a phase that flags more requests than the engine keeps, an arm of the hooked engine run
with --no-digests, an engine without digests (the template named for the arm's runtime); and the profile's
capacity is the engine's own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator import cli, config
from orchestrator.engines import ENGINES
from orchestrator.run import refusals
from orchestrator.run.send import digests

HOOKED = ENGINES["transformers_hooked"]
ENGINE_DIGESTS = Path(__file__).parents[2] / "arms" / "transformers-hooked" / "hookedengine" / "digests.py"


def _problems(*overrides: str) -> list[str]:
    return refusals.config_check(config.to_typed(config.compose(["study=locate_tiny", *overrides]))).problems


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """`orchestrator plan ...`'s one line of refusal."""
    assert cli.main(["plan", *argv]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_the_profile_keeps_as_many_requests_digests_as_the_engine() -> None:
    tree = ast.parse(ENGINE_DIGESTS.read_text())
    [kept] = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "STORE_REQUESTS" for t in node.targets)
              and isinstance(node.value, ast.Constant)]
    assert HOOKED.digest_capacity == kept == 512


def test_a_phase_that_flags_more_requests_than_the_engine_keeps_is_refused(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    # locate_tiny: 2 prompts; a batch of 4 per prompt and batch: 2 x 4 x 64 = 512 flagged, the most kept
    assert _problems("protocol.phases.concurrent.batches=64") == []
    refused = _refused(["study=locate_tiny", "protocol.phases.concurrent.batches=65"], capsys)
    assert refused == (
        "error: protocol.phases.concurrent flags 520 requests for their digests (protocol.request.digests), more "
        "than the 512 the engine of arm(s) 'invariant', 'planted', 'variant' keeps: the oldest would be gone "
        "before the phase's fetch; make it at most 512 (2 prompts x fewer repeats or batches), or split it "
        "into phases")
    # each phase counts alone: two phases of 512 are fetched apart
    assert _problems("protocol.phases.concurrent.batches=64", "protocol.phases.sequential.repeats=256") == []
    assert _problems("protocol.phases.concurrent.batches=65", "protocol.request.digests=false") == []


def test_an_arm_that_turns_its_digests_off_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    refused = _refused(["study=locate_tiny", "+arms.variant.engine_args.digests=false",
                        "study.variables.variant=[engine_args.batch-invariant,engine_args.digests]"], capsys)
    assert refused == ("error: protocol.request.digests is on, but arm 'variant' runs with --no-digests, which "
                       "records no digests: drop --no-digests (arms.variant.engine_args.digests: true), or set "
                       "protocol.request.digests: false")
    assert any("arm 'invariant' runs with --no-digests" in p for p in _problems(
        "arms.invariant.command=[python,-m,hookedengine,--no-digests]", "study.allow_confounded=true"))
    assert _problems("+arms.variant.engine_args.digests=true", "study.allow_confounded=true") == []
    assert _problems("+arms.variant.engine_args.digests=false", "study.allow_confounded=true",
                     "protocol.request.digests=false") == []


@pytest.mark.parametrize(("runtime", "template"), [("docker", "transformers_hooked"),
                                                   ("process", "transformers_hooked_process")])
def test_the_refusal_of_an_engine_without_digests_names_the_template_of_the_arm_s_runtime(
        runtime: str, template: str) -> None:
    arm = "reference" if runtime == "docker" else "reference_process"
    [problem] = [p for p in refusals.config_check(config.to_typed(config.compose([
        "protocol=locate", f"runtime={runtime}", f"arm@arms.baseline={arm}", f"arm@arms.wide_batch={arm}"]))
    ).problems if "arm 'baseline'" in p]
    assert problem.endswith(f"make it an arm of `engine: transformers_hooked` (template conf/arm/{template}.yaml), "
                            "or set protocol.request.digests: false")


def test_missing_note_of_a_run_without_notes_or_arms(tmp_path: Path) -> None:
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import TableWriter

    paths = RunPaths(tmp_path / "run").make()
    assert digests.missing_note(paths, "a") is None  # no arms table yet
    with TableWriter(paths, "arms", "a") as arms:
        arms.append({"arm": "a", "start": 0, "digests_note": None})
        arms.append({"arm": "a", "start": 1, "digests_note": "a later start's"})
        arms.append({"arm": "b", "start": 0, "digests_note": "digests of 1 of 2 flagged requests not recorded"})
    assert digests.missing_note(paths, "a") is None
    assert digests.missing_note(paths, "b") == "digests of 1 of 2 flagged requests not recorded"
