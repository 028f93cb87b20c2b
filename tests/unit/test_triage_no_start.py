"""A triage whose arm never starts (docs/triage.md: finding 4, start failures; exit 4): its verdict names the
start failures, never "repeatable in everything tried" over 0 requests."""

from __future__ import annotations

from orchestrator.triage.findings import REPEATABLE, rank
from orchestrator.triage.state import FAILED, SKIPPED, StepOutcome, TriageState


def test_an_arm_that_never_started_is_a_start_failure_not_repeatable() -> None:
    state = TriageState("baseline", [], 400, {
        "starts": StepOutcome("starts", FAILED, reason="its study ended with exit status 4; see run", run_dir="run",
                              command="orchestrator run ...", starts=5, starts_ready=0, start_failure_upper_95=1.0),
        "floor": StepOutcome("floor", SKIPPED, reason="the arm did not start")})
    found = rank(state, "transformers_hooked")
    assert not found.verdict.startswith(REPEATABLE)  # before: "repeatable in everything tried: 0 divergent of 0"
    assert found.verdict == "most likely cause: 5 of 5 starts failed"
    assert [f.kind for f in found.findings] == ["starts"]


def test_the_step_of_an_arm_that_never_started_says_not_measured() -> None:
    from orchestrator.triage.page import to_markdown

    state = TriageState("baseline", [], 400, {
        "starts": StepOutcome("starts", FAILED, run_dir="run", starts=5, starts_ready=0)})
    row = next(line for line in to_markdown(rank(state, "reference")).splitlines() if line.startswith("| starts"))
    assert "not measured" in row and "repeatable" not in row  # before: "repeatable, 0 divergent of 0"
    assert "0 of 5 started" in row and "first answer" not in row  # before: "1 distinct first answer(s)"
