"""A recorded study for the report's and the record's tests: the default study on the fake runtime (real
Parquet, real reports, no container), its second arm noisy (its logprobs move every call)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import config
from orchestrator.config.schema import ArmConfig
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, read_run
from orchestrator.report.build import build
from orchestrator.run.study import StudyRunner
from tests.fake_engine import fake_runtime


def noisy_study_run(root: Path, run_id: str, gate: dict[str, Any] | None = None, host: str = "test-host",
                    arm_config: Callable[[ArmConfig], None] | None = None) -> RunPaths:
    """`arm_config`: changes every arm's config before it runs (its build context, its secret_env)."""
    typed = config.to_typed(config.compose(["protocol=smoke"]))
    for name, arm in typed.arms.items():
        arm.image = "fake-noisy" if name == "wide_batch" else "fake-engine"
        arm.build.context = None
        if arm_config is not None:
            arm_config(arm)
    paths = RunPaths(root)
    runner = StudyRunner(typed, paths, run_id, fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    meta = {"study": "default", "run_id": run_id, "baseline": "baseline", "gate": gate, "host": host}
    paths.meta.write_text(json.dumps(meta))  # as `orchestrator run` writes it
    build(Recorded.of([read_run(paths, meta)]))
    return paths
