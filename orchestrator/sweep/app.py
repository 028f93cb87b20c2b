"""The `run` verb is a Hydra app: one study per job (a multirun sweeps them, through a launcher), each
into Hydra's run dir."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from orchestrator import config
from orchestrator.errors import OrchestratorError
from orchestrator.record.paths import RunPaths
from orchestrator.run.execute import OWN_CONFIG_ALLOW, execute_study, preflight


def run_with_hydra(argv: list[str]) -> int:
    """Check the composed config first (a typo is one clear line and exit 2, before anything starts),
    then hand the command line to Hydra's main, which makes the run dir and calls `run_study`."""
    if any(a in ("-m", "--multirun") for a in argv):
        from orchestrator.sweep.callback import check_parallel_gpus

        check_parallel_gpus(argv)
    elif not any(a.startswith("--") for a in argv):
        typed = config.to_typed(config.compose(argv))
        config.resolve_prompts(typed.prompts)
        preflight(typed)
    import hydra

    from orchestrator.config.schema import register_configs

    register_configs()
    status: dict[str, int] = {"code": 0}

    @hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name=config.CONFIG_NAME)
    def task(cfg: Any) -> None:
        status["code"] = run_study(cfg)

    saved = sys.argv
    sys.argv = ["orchestrator", *argv]
    try:
        task()
    finally:
        sys.argv = saved
    return status["code"]


def run_study(cfg: Any) -> int:
    """The Hydra task: one study into Hydra's run dir. Returns the exit status."""
    from hydra.core.hydra_config import HydraConfig

    try:
        typed = config.to_typed(cfg)
        paths = RunPaths(Path(HydraConfig.get().runtime.output_dir))
        return execute_study(typed, paths, list(typed.runtime.allow), OWN_CONFIG_ALLOW)
    except OrchestratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_status) from None
