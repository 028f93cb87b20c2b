"""Where configs are found: the project's conf/, then the user's config dirs. Hydra takes the first file
of a name it finds, so a user's file named like one of the project's would be silently ignored: that is
refused, naming both files (rename yours). The dirs are given by:

    --config-dir DIR (or -cd DIR, --config-dir=DIR), repeatable    of run, check, plan, probe (--arm)
    hydra.searchpath=[file:///DIR, ...]                              Hydra's own override
    ORCHESTRATOR_CONFIG_PATH=DIR1:DIR2                               the environment

The dirs reach Hydra as one `hydra.searchpath` override, and the composed config records them
(`config_dirs`), so prompt files are looked up beside the config dirs that hold their sets, in a Hydra
job as in the checks made before it.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.config.locations import CONF_DIR
from orchestrator.errors import ConfigError

MULTIRUN = ("-m", "--multirun")  # Hydra's flags for a sweep: `run -m` is a multirun

ENV_VAR = "ORCHESTRATOR_CONFIG_PATH"
FLAGS = ("--config-dir", "-cd")


def split_config_dirs(argv: list[str], environ: dict[str, str] | None = None) -> tuple[list[Path], list[str]]:
    """(the user's config dirs, the arguments without them). Relative dirs resolve against the working
    directory; a dir that does not exist is one clear error."""
    env = os.environ if environ is None else environ
    given: list[str] = []
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in FLAGS:
            value = next(args, None)
            if value is None:
                raise ConfigError(f"{arg} needs a directory: {arg} DIR")
            given.append(value)
        elif arg.startswith("--config-dir="):
            given.append(arg.split("=", 1)[1])
        elif arg.startswith("hydra.searchpath="):
            given += _searchpath_dirs(arg)
        else:
            rest.append(arg)
    given += [d for d in env.get(ENV_VAR, "").split(os.pathsep) if d]
    dirs: list[Path] = []
    for value in given:
        path = Path(value).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"config dir {value} does not exist (from --config-dir, hydra.searchpath or "
                              f"{ENV_VAR}): pass a folder that holds arm/, study/, prompts/, ...")
        if path not in dirs:
            dirs.append(path)
    if clashes := shadowed(dirs):
        raise ConfigError(clashes)
    return dirs, rest


def shadowed(dirs: list[Path]) -> list[str]:
    """User config files that a file of the same group and name in the project's conf/ would hide."""
    problems = []
    for root in dirs:
        for path in sorted(root.glob("*/*.yaml")):
            group = path.parent.name
            if (CONF_DIR / group / path.name).is_file():
                problems.append(f"{path} has the name of the project's conf/{group}/{path.name}, which would be used "
                                f"instead: rename yours (e.g. {group}/my_{path.name})")
    return problems


def _searchpath_dirs(arg: str) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        override = OverridesParser.create().parse_override(arg)
        values = override.value()
    except Exception as exc:
        raise ConfigError(f"'{arg}': {exc}; write hydra.searchpath=[file:///DIR,...]") from exc
    entries = values if isinstance(values, list) else [values]
    dirs = []
    for entry in entries:
        text = str(entry)
        if text.startswith("pkg://"):
            raise ConfigError(f"hydra.searchpath entry {text}: only file:// folders are supported here")
        dirs.append(text.removeprefix("file://"))
    return dirs


def overrides_for(dirs: list[Path]) -> list[str]:
    """What makes Hydra (and the job's own config) see the dirs."""
    if not dirs:
        return []
    quoted = ",".join(f"'{d}'" for d in dirs)
    return [f"hydra.searchpath=[{','.join(f'file://{d}' for d in dirs)}]", f"config_dirs=[{quoted}]"]
