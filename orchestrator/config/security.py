"""Dangerous container options are refused unless explicitly allowed.

A config of your own allows them with `runtime.allow: [...]`; `orchestrator reproduce` runs someone
else's config and ignores that list: only its own `--allow KIND` counts. Nothing from a config is ever
instantiated or executed on the host (no `_target_`): configs are data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orchestrator.config.catalog import line
from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError

# How a config of one's own accepts a dangerous option.
OWN_CONFIG_ALLOW = "runtime.allow=[{kind}] (in the config, or on the command line as '+runtime.allow=[{kind}]')"
KINDS = ("privileged", "cap_add", "host_network", "host_ipc", "host_root_mount", "docker_socket_mount")
# A name that says it holds a credential (HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD; not TOKENIZERS_PARALLELISM)
SECRET_NAME = re.compile(r"(^|[_-])(TOKEN|SECRET|PASSWORD|PASSWD|API[_-]KEY|ACCESS[_-]KEY|PRIVATE[_-]KEY|CREDENTIALS?)"
                         r"($|[_-])")
FLAG_WORDS = ("", "0", "1", "true", "false", "yes", "no", "on", "off")  # what an on/off setting holds


def findings(config: Config) -> list[tuple[str, str]]:
    """(kind, where) for every dangerous option the arms ask for."""
    found = []
    for name, arm in config.arms.items():
        if arm.privileged:
            found.append(("privileged", f"arms.{name}.privileged=true"))
        if arm.cap_add:
            found.append(("cap_add", f"arms.{name}.cap_add={list(arm.cap_add)}"))
        if arm.network_host:
            found.append(("host_network", f"arms.{name}.network_host=true"))
        if arm.ipc_mode == "host":
            found.append(("host_ipc", f"arms.{name}.ipc_mode=host"))
        for i, volume in enumerate(arm.volumes):
            if volume.host.rstrip("/") == "":
                found.append(("host_root_mount", f"arms.{name}.volumes[{i}].host=/"))
            elif volume.host.rstrip("/").endswith("docker.sock"):
                found.append(("docker_socket_mount", f"arms.{name}.volumes[{i}].host={volume.host}"))
    return found


def secrets_in_config(config: Config) -> list[str]:
    """A credential's value written in an arm's env or engine args, which the record stores as written (the
    composed config, the arms table, the reports): one line each, naming secret_env, which keeps values out."""
    return [found for name, arm in config.arms.items() for found in secrets_in_arm(name, arm.env, arm.engine_args)]


def secrets_in_arm(name: str, env: Mapping[str, Any], engine_args: Mapping[str, Any]) -> list[str]:
    """secrets_in_config's lines for one arm, named as the user named it (triage checks its arm before it
    writes the arm into its steps' configs)."""
    found = []
    for key, value in {**{f"env.{k}": v for k, v in env.items()},
                       **{f"engine_args.{k}": v for k, v in engine_args.items()}}.items():
        if SECRET_NAME.search(key.split(".", 1)[1].upper()) and not _flag(value):
            var = key.split(".", 1)[1] if key.startswith("env.") else "THE_ENGINES_VARIABLE"
            how = "" if key.startswith("env.") else (" (an engine flag: give the engine the credential "
                                                     "through an env var it reads instead, e.g. vLLM's "
                                                     "--api-key through VLLM_API_KEY)")
            found.append(f"arms.{name}.{key} looks like a credential, and an arm's config is stored as written "
                         f"(the composed config, the arms table, the reports): remove it, set {var} in your "
                         f"environment and pass its name, arms.{name}.secret_env=[{var}] (its value then "
                         f"reaches the engine and is never stored){how}")
    return found


def _flag(value: Any) -> bool:
    """Empty, or an on/off flag (HF_HUB_DISABLE_IMPLICIT_TOKEN=1 keeps a token from being sent): no credential."""
    return value is None or isinstance(value, bool) or str(value).strip().lower() in FLAG_WORDS


def problems(config: Config, allowed: list[str], how_to_allow: str = OWN_CONFIG_ALLOW) -> list[str]:
    """`how_to_allow` formats with {kind}: e.g. "runtime.allow=[{kind}]" or "--allow {kind}"."""
    found = [line("unknown-name", "allow", kind, KINDS) for kind in allowed if kind not in KINDS]
    found += secrets_in_config(config)
    return found + [f"{where} is a dangerous container option ({kind}), refused; to accept it, pass "
                    + how_to_allow.format(kind=kind) for kind, where in findings(config) if kind not in allowed]


def enforce(config: Config, allowed: list[str], how_to_allow: str) -> None:
    if found := problems(config, allowed, how_to_allow):
        raise ConfigError(found)
