"""`orchestrator show RUN` opens with what report.md opens with: per arm, whether it starts, stays correct and
what it costs, then the verdict, the gate and the guard's (a CONFOUNDED study must not look clean in the
terminal). Records from tests/load_record.py, the guard's result from a composed study."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.cli import main
from orchestrator.guard import declared as guard_declared
from orchestrator.guard import observed as guard_observed
from orchestrator.guard.results import GuardResult
from orchestrator.record.paths import RunPaths, read_json
from orchestrator.record.recorded import Recorded, read, read_run
from orchestrator.report.build import build
from tests.load_record import ArmPlan, write_load_record


def _shown(paths: RunPaths, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["show", str(paths.root)]) == 0
    return capsys.readouterr().out


def _page_opening(paths: RunPaths) -> str:
    """report.md under its title, up to the environment's section."""
    text = paths.report_md.read_text()
    return text[text.index("## Per arm"):text.index("## Environment")]


def test_show_prints_the_lines_report_md_opens_with_for_a_load_study(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_load_record(tmp_path / "run", {"baseline": ArmPlan([0.10, 0.11, 0.09], ready_s=[4.1, 3.9]),
                                                 "wide_batch": ArmPlan([0.20, 0.22], divergent_probes=1)})
    build(Recorded.of([read_run(paths, {**read_json(paths.meta), "gate": {"max_divergence_rate": 0.0}})]))
    shown, opening = _shown(paths, capsys), _page_opening(paths)
    assert opening in shown  # the same lines, in the same order
    for said in ("- Starts: 2 of 2", "- Stays correct: 0 of 6 probes diverged", "- Costs at poisson 8/s: ",
                 "Gate: FAILED (max_divergence_rate 0.0)"):
        assert said in opening
    assert shown.index("- Stays correct") < shown.index("environment")


def test_a_confounded_study_says_so_in_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two arms that differ in two variables the study did not declare (a backend pin and an env variable)."""
    cfg = config.to_typed(config.compose(["study=guard_finalize_and_pin", "study.allow_confounded=true",
                                          "+arms.fused.env.VLLM_BATCH_INVARIANT=0"]))
    paths = write_load_record(tmp_path / "run", {"unfused": ArmPlan([0.1, 0.1]), "fused": ArmPlan([0.1, 0.1])})
    guard_observed.write(paths, GuardResult(declared=guard_declared.enforce_declared(cfg)))
    build(read(paths))
    shown, opening = _shown(paths, capsys), _page_opening(paths)
    assert opening in shown
    [confounded] = [line for line in shown.splitlines() if line.startswith("**CONFOUNDED**")]
    assert "fused vs unfused in config: " in confounded
    assert "engine_args.moe-backend" in confounded and "env.VLLM_BATCH_INVARIANT" in confounded
