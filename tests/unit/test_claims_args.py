"""`orchestrator claims FILE --study NAME --run RUN_DIR... OVERRIDES` as docs/claims.md writes it: the overrides
after `--run`'s run dirs are the study's overrides, not run dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.console import Outcome
from orchestrator.sweep import claims
from orchestrator.verbs import claims as verb


def test_overrides_after_the_run_dirs_go_to_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def check(given: Path, study: str | None, line: Any, run_dirs: list[Path], out: Path | None) -> Outcome:
        seen.update(study=study, overrides=list(line.overrides), run_dirs=run_dirs)
        return Outcome()

    monkeypatch.setattr(claims, "check_claims", check)
    (tmp_path / "run-a").mkdir()
    verb.main(["c.yaml", "--study", "batch_invariance", "--run", str(tmp_path / "run-a"), "runtime=process",
               "~arms.variant.engine_args.x", '+arms.variant.env.VLLM_BATCH_INVARIANT="0"'])
    assert seen["run_dirs"] == [tmp_path / "run-a"]  # before: the overrides were taken for run dirs
    assert seen["overrides"] == ["runtime=process", "~arms.variant.engine_args.x",
                                 '+arms.variant.env.VLLM_BATCH_INVARIANT="0"']
