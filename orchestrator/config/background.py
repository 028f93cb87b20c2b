"""A load phase's background traffic (docs/load.md): `load.background` is `synthetic` (the default, generated:
config/synthetic.py), `study` or null (the study's own prompts), or names a prompt set's file under prompts/ (a user
config dir's, then the project's), read as the study's own prompt set is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.config.compose import resolve_prompts
from orchestrator.config.locations import CONF_DIR
from orchestrator.config.schema import Config, LoadConfig, PhaseKind, PromptSetConfig
from orchestrator.config.synthetic import STUDY, SYNTHETIC, prompt_count, synthetic_prompts
from orchestrator.errors import ConfigError


@dataclass(frozen=True)
class Background:
    """A load phase's background prompts: id -> text, and the synthetic set's own max_tokens per id (empty: the
    phase's background_max_tokens, cycled; its prefix reuse is run/load/schedule.py's, from load.synthetic)."""

    texts: dict[str, str]
    max_tokens: dict[str, int] = field(default_factory=dict)


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
                          f"{SYNTHETIC} (generated) or {STUDY} (the study's own prompts)")
    try:
        node = OmegaConf.merge(OmegaConf.structured(PromptSetConfig), OmegaConf.load(path))
        prompt_set = OmegaConf.to_object(node)
    except (OmegaConfBaseException, OSError, ValueError) as exc:
        raise ConfigError(f"load.background {name}: {path} is not a prompt set ({str(exc).splitlines()[0]}); "
                          "write it as conf/prompts/default.yaml is written") from exc
    assert isinstance(prompt_set, PromptSetConfig)
    texts = resolve_prompts(prompt_set, config_dirs)
    if not texts:
        raise ConfigError(f"load.background {name}: {path} has no prompts; add some, or set it to {SYNTHETIC}")
    return texts


def uses_study(load: LoadConfig) -> bool:
    """The phase's background is the study's own prompts (`study`, or null as before `synthetic` was the default)."""
    return load.background in (None, STUDY)


def phase_backgrounds(config: Config) -> dict[str, Background]:
    """Load phase -> its background, for the phases that do not use the study's prompts."""
    found = {}
    for name, phase in config.protocol.phases.items():
        load = phase.load
        if phase.kind is not PhaseKind.load or uses_study(load) or load.background is None:
            continue
        if load.background == SYNTHETIC:
            made = synthetic_prompts(load.synthetic, prompt_count(config, load.synthetic), load.seed)
            found[name] = Background({i: p.text for i, p in made.items()}, {i: p.max_tokens for i, p in made.items()})
        else:
            found[name] = Background(background_prompts(load.background, config.config_dirs))
    return found
