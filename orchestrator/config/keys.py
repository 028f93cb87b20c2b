"""Keys no schema block names: found in every nested block of a config (a plain one: `+key=value` appends and
a file composed untyped keep them), each with its closest field; the block that refused a key in an error;
where a key of a composed config was written (a config file, the command line)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.config.locations import CONF_DIR, CONFIG_NAME
from orchestrator.errors import did_you_mean


def unknown(node: Any, cls: type, path: str, written: Callable[[str], str] | None = None
            ) -> list[tuple[str, str]]:
    """(dotted path, line) for keys that no schema field names, in every nested block (a field typed by a
    dataclass, optional or not, or a map or list of them), each with the closest field. Hydra's `+key=value`
    appends bypass the struct check, and `compose._compose_untyped` keeps a file's. `written`: where a key was
    written ("in FILE", "on the command line"; "" unknown)."""
    if not isinstance(node, dict):
        return []
    hints = typing.get_type_hints(cls)
    problems = []
    for key, value in node.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in hints:
            source = written(where) if written else ""
            problems.append((where, f"unknown key '{key}' in {path or 'the top level'}"
                                    f"{f' ({source})' if source else ''}."
                                    f"{did_you_mean(str(key), [h for h in hints if not h.startswith('_')])}"))
            continue
        block = _block(hints[key])
        if block is None:
            continue
        if typing.get_origin(hints[key]) is dict:  # a map of blocks: one per entry
            items = value or {}
        elif isinstance(value, list):  # a list of blocks
            items = {str(i): item for i, item in enumerate(value)}
        else:  # the block itself
            items = {"": value}
        for name, item in items.items():
            problems += unknown(item, block, f"{where}.{name}" if name else where, written)
    return problems


def _block(hint: Any) -> type | None:
    """The dataclass a field's value is (or holds, as a map's values or a list's items, or when optional)."""
    if dataclasses.is_dataclass(hint):
        return hint if isinstance(hint, type) else None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict and len(args) == 2:
        return _block(args[1]) if dataclasses.is_dataclass(args[1]) else None
    if origin is list or origin in (typing.Union, types.UnionType):
        return next((a for a in args if dataclasses.is_dataclass(a) and isinstance(a, type)), None)
    return None


def sources(cfg: DictConfig) -> Callable[[str], str]:
    """Where a dotted key of the composed config was written: "on the command line" when an override sets it,
    else "in FILE" for the first config file the composition picked (its defaults' choices, the user's dirs
    before conf/) with a line `KEY:`; "" when neither says."""
    hydra = cfg.get("hydra") if isinstance(cfg, DictConfig) else None
    task = [str(o) for kind in ("task", "hydra")  # the study's overrides, and Hydra's own (hydra.sweeper.X)
            for o in OmegaConf.select(cfg, f"hydra.overrides.{kind}", default=None) or []] if hydra else []
    choices = dict(OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}) if hydra else {}
    dirs = [Path(d) for d in cfg.get("config_dirs") or []]
    files = [CONF_DIR / f"{CONFIG_NAME}.yaml"]
    for group, option in choices.items():
        group = str(group).split("@", 1)[0]
        if option is not None and not group.startswith("hydra/"):
            files += [root / group / f"{option}.yaml" for root in (*reversed(dirs), CONF_DIR)]

    def written(dotted: str) -> str:
        if any(o.split("=", 1)[0].lstrip("+~") == dotted for o in task):
            return "on the command line"
        key = re.compile(rf"(?:^|[{{,])\s*['\"]?{re.escape(dotted.rsplit('.', 1)[-1])}['\"]?\s*:", re.MULTILINE)
        for path in files:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if key.search(path.read_text(encoding="utf-8")):
                    return f"in conf/{path.relative_to(CONF_DIR)}" if path.is_relative_to(CONF_DIR) else f"in {path}"
        return ""
    return written


def plugins_unknown(cfg: DictConfig, written: Callable[[str], str]) -> list[str]:
    """Lines for keys of the Hydra plugins a config picks (hydra.sweeper, hydra.launcher) that the dataclass
    each registered in Hydra's ConfigStore lacks: appended with +, they reach the plugin untyped (the onset
    sweeper's settings would refuse them only once the sweep starts, and not in `check`)."""
    from hydra.core.config_store import ConfigStore

    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
    found = []
    for plugin in ("sweeper", "launcher"):
        option, node = choices.get(f"hydra/{plugin}"), OmegaConf.select(cfg, f"hydra.{plugin}", default=None)
        if option is None or not isinstance(node, DictConfig):
            continue
        with contextlib.suppress(Exception):  # a plugin Hydra cannot load again: Hydra's own error says it
            block = OmegaConf.get_type(ConfigStore.instance().load(f"hydra/{plugin}/{option}.yaml").node)
            if isinstance(block, type) and dataclasses.is_dataclass(block):
                found += [line for _, line in unknown(OmegaConf.to_container(node), block, f"hydra.{plugin}", written)]
    return found


def refused(exc: BaseException) -> str | None:
    """The dotted key OmegaConf refused (its `full_key`, somewhere in the chain Hydra wraps it in); None: none."""
    seen: BaseException | None = exc
    while seen is not None:
        if key := getattr(seen, "full_key", None):
            return str(key)
        seen = seen.__cause__ or seen.__context__
    return None


def schema_of(exc: BaseException) -> type | None:
    """The dataclass that refused a key (OmegaConf's `object_type`, somewhere in the chain Hydra wraps it in):
    any block of the schema, or of a plugin's (the onset sweeper's `axis`)."""
    seen: BaseException | None = exc
    while seen is not None:
        block = getattr(seen, "object_type", None)
        if isinstance(block, type) and dataclasses.is_dataclass(block):
            return block
        seen = seen.__cause__ or seen.__context__
    return None


def siblings(exc: BaseException) -> list[str]:
    """The keys beside the one a map refused (OmegaConf's `parent_node`, somewhere in the chain Hydra wraps it
    in): where a typo's intended key is."""
    seen: BaseException | None = exc
    while seen is not None:
        parent = getattr(seen, "parent_node", None)
        if isinstance(parent, DictConfig):
            return [str(key) for key in parent]
        seen = seen.__cause__ or seen.__context__
    return []
