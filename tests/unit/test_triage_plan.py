"""`orchestrator triage --plan` (docs/triage.md): its count of steps is the steps it lists, and with `--resume DIR`
it prints the plan of the triage in DIR and runs nothing; on an engine that records digests it lists `locate`."""

from __future__ import annotations

from pathlib import Path

from orchestrator.triage.state import TriageState, load, save
from orchestrator.verbs import triage as verb

ARM = ["runtime=process", "arm@arms.baseline=reference_process"]


def _counted(lines: tuple[str, ...]) -> tuple[int, int]:
    """(the steps the first line says, the step lines listed under it)."""
    said = int(lines[0].split(": ")[1].split(" steps")[0])
    return said, len([line for line in lines[1:] if not line.startswith("  all steps")])


def test_the_plan_counts_the_steps_it_lists_the_onset_among_them() -> None:
    for extra in ([], ["+arms.baseline.engine_args.fused-finalize=true"]):  # without a switch on, and with one
        lines = verb.main([*ARM, *extra, "--plan"]).out
        assert any(line.startswith("  onset") for line in lines)
        said, listed = _counted(lines)
        assert said == listed  # before: "4 steps" over 5 lines (the onset left out of the count)


def test_on_an_engine_that_records_digests_the_plan_lists_the_locate_step_and_counts_it() -> None:
    hooked = ["study=locate_tiny", "--arm", "variant", "--plan"]
    lines = verb.main(hooked).out
    step = [line for line in lines if line.startswith("  locate (where variation remains): no requests of its own")]
    assert len(step) == 1 and "floor, concurrent, length, load steps' requests" in step[0], lines
    said, listed = _counted(lines)
    assert said == listed  # before: the locate step ran after the others, unlisted and uncounted
    assert not any(line.startswith("  locate") for line in verb.main([*ARM, "--plan"]).out)  # no digests: none


def test_a_resumed_plan_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    save(tmp_path, TriageState("baseline", ARM, 400))
    lines = verb.main(["--resume", str(tmp_path), "--plan"]).out
    assert lines[0].startswith("triage of arm 'baseline' (reference): ")  # before: the triage ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["triage.json"] and load(tmp_path) is not None
