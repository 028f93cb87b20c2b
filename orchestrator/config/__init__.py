"""config: what a study is. Dataclass schemas registered in Hydra's ConfigStore (schema.py), composing the
project's conf/ and user config dirs into a typed `Config` (compose.py), and the checks made on a config
before anything starts (security.py: dangerous container options).

May import: errors, Hydra, OmegaConf. Never: runtime, run, record, guard, analysis, report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.config.compose import CONF_DIR, CONFIG_NAME, PROJECT_ROOT, compose, resolve_prompts, to_typed


def __getattr__(name: str) -> Any:
    """Lazy: config.probe and config.locations load without OmegaConf (the probe verb on a GPU machine)."""
    if name in __all__:
        from orchestrator.config import compose as composition

        return getattr(composition, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONFIG_NAME", "CONF_DIR", "PROJECT_ROOT", "compose", "resolve_prompts", "to_typed"]
