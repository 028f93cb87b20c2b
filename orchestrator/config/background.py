"""A load phase's background traffic (docs/load.md): `load.background` names a prompt set's file under prompts/
(a user config dir's, then the project's), read as the study's own prompt set is."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.compose import resolve_prompts
from orchestrator.config.locations import CONF_DIR
from orchestrator.config.schema import Config, PhaseKind, PromptSetConfig
from orchestrator.errors import ConfigError


def background_prompts(name: str, config_dirs: list[str] | None = None) -> dict[str, str]:
    """Prompt id -> text of the named set (`background` or `background.yaml`); a ConfigError naming where it
    was looked for."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    file = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    folders = [*(Path(d) / "prompts" for d in config_dirs or []), CONF_DIR / "prompts"]
    path = Path(file) if Path(file).is_absolute() else next((f / file for f in folders if (f / file).is_file()), None)
    if path is None or not path.is_file():
        raise ConfigError(f"load.background {name}: no prompt set {file} (looked in "
                          f"{', '.join(str(f) for f in folders)}); name a prompt set's file under prompts/, or "
                          "null for the study's own prompts")
    try:
        node = OmegaConf.merge(OmegaConf.structured(PromptSetConfig), OmegaConf.load(path))
        prompt_set = OmegaConf.to_object(node)
    except (OmegaConfBaseException, OSError, ValueError) as exc:
        raise ConfigError(f"load.background {name}: {path} is not a prompt set ({str(exc).splitlines()[0]}); "
                          "write it as conf/prompts/default.yaml is written") from exc
    assert isinstance(prompt_set, PromptSetConfig)
    texts = resolve_prompts(prompt_set, config_dirs)
    if not texts:
        raise ConfigError(f"load.background {name}: {path} has no prompts; add some, or set it to null")
    return texts


def phase_backgrounds(config: Config) -> dict[str, dict[str, str]]:
    """Load phase -> its background prompts, for the phases that name a set (the others use the study's)."""
    return {name: background_prompts(phase.load.background, config.config_dirs)
            for name, phase in config.protocol.phases.items()
            if phase.kind is PhaseKind.load and phase.load.background is not None}
