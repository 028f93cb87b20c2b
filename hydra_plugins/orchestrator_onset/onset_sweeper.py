"""hydra/sweeper=onset: where along one numeric axis a study's outputs start to diverge, found in rounds of
jobs through whatever launcher is configured (docs/onset.md). The search is orchestrator/sweep/onset.py."""

# no `from __future__ import annotations`: Hydra imports plugins outside sys.modules, where a dataclass
# with string annotations cannot be made

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from orchestrator.sweep.onset_config import SWEEPER_TARGET, AxisConf, TargetConf


@dataclass
class OnsetSweeperConf:
    """The settings of orchestrator/sweep/onset_config.py OnsetSettings, as Hydra's config of the plugin."""

    _target_: str = SWEEPER_TARGET
    axis: AxisConf = field(default_factory=AxisConf)
    target: TargetConf = field(default_factory=TargetConf)
    width: float | None = None
    confidence: float = 0.95
    max_jobs: int = 24
    max_requests: int | None = None
    round_size: int = 1
    per: list[str] = field(default_factory=list)
    budget_tokens: int | None = None
    bayes_factor_islands: float = 20.0
    prior_below: list[float] = field(default_factory=lambda: [1.0, 4.0])
    prior_above: list[float] = field(default_factory=lambda: [1.0, 1.0])
    expect: str | None = None


ConfigStore.instance().store(group="hydra/sweeper", name="onset", node=OnsetSweeperConf, provider="orchestrator")


class OnsetSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        super().__init__()
        self.settings = settings
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                               task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from orchestrator.sweep.onset_run import run_search

        assert self.config is not None
        return run_search(self.settings, list(arguments), self.config, self._launch)

    def _launch(self, batch: list[list[str]], first_job: int) -> list[tuple[int, Path]]:
        """One round through the configured launcher: each job's exit status and run dir."""
        assert self.launcher is not None and self.config is not None
        self.validate_batch_is_legal(batch)
        returns = self.launcher.launch(batch, initial_job_idx=first_job)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        out = []
        for number, ret in enumerate(returns):
            try:
                status = int(ret.return_value)
            except Exception:  # the job raised: Hydra's JobReturn re-raises it; a bug, status 1
                status = 1
            out.append((status, _run_dir(ret.hydra_cfg, sweep_dir / str(first_job + number))))
        return out


def _run_dir(hydra_cfg: Any, fallback: Path) -> Path:
    output = OmegaConf.select(hydra_cfg, "hydra.runtime.output_dir") if hydra_cfg is not None else None
    return Path(output) if output else fallback
