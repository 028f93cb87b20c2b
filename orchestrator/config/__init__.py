"""config: what a study is. Dataclass schemas registered in Hydra's ConfigStore (schema.py), composing the
project's conf/ and user config dirs into a typed `Config` (compose.py), and the checks made on a config
before anything starts (security.py: dangerous container options).

May import: runtime, engines, errors. Third-party: Hydra, OmegaConf, PyYAML.
"""

try:
    from orchestrator.config.compose import CONF_DIR, CONFIG_NAME, PROJECT_ROOT, compose, resolve_prompts, to_typed
except ModuleNotFoundError as missing:  # no OmegaConf/Hydra (a GPU machine): config.probe still loads
    if missing.name not in ("omegaconf", "hydra"):
        raise

__all__ = ["CONFIG_NAME", "CONF_DIR", "PROJECT_ROOT", "compose", "resolve_prompts", "to_typed"]
