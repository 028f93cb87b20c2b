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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.locations import CONF_DIR
from orchestrator.errors import ConfigError

MULTIRUN = ("-m", "--multirun")  # Hydra's flags for a sweep: `run -m` is a multirun
# Hydra's own flags that take a value, and ours (--out: a recorded run's new run dir; --like: plan's earlier run)
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--info",
                    "-i", "--experimental-rerun", "--out", "--like"}

ENV_VAR = "ORCHESTRATOR_CONFIG_PATH"
FLAGS = ("--config-dir", "-cd")


@dataclass(frozen=True)
class CommandLine:
    """A Hydra command line, as `run`, `check` and `plan` take it: the user's config dirs, the flags (a flag's
    value follows it), the overrides."""

    dirs: list[Path]
    flags: list[str]
    overrides: list[str]

    @classmethod
    def parse(cls, argv: list[str], environ: dict[str, str] | None = None) -> CommandLine:
        dirs, rest = split_config_dirs(argv, environ)
        flags, overrides, args = [], [], iter(rest)
        for arg in args:
            name = arg.split("=", 1)[0]
            if not arg.startswith("-"):
                overrides.append(arg)
            elif name in FLAGS_WITH_VALUE and "=" in arg:  # --like=RUN
                flags += [name, arg.split("=", 1)[1]]
            else:
                flags.append(arg)
                if arg in FLAGS_WITH_VALUE:
                    flags.append(next(args, ""))
        return cls(dirs, flags, overrides)

    def sweeps(self, composed: Any = None) -> bool:
        """The one answer to "a sweep, or one run?": -m (--multirun), or the composed config's own
        `hydra.mode: MULTIRUN`."""
        if any(flag in MULTIRUN for flag in self.flags):
            return True
        from hydra.types import RunMode

        return composed is not None and composed.hydra.mode == RunMode.MULTIRUN

    def to_hydra(self) -> bool:
        """Hydra's own flags besides -m (--cfg, --help, --info, ...): the command line goes to Hydra's main as it
        is, unchecked."""
        return any(flag not in MULTIRUN for flag in self.flags)

    def value(self, flag: str, needs: str) -> str | None:
        """A flag's value; None when it is not given. `needs`: what to say when it is given without one."""
        if flag not in self.flags:
            return None
        value = self.flags[self.flags.index(flag) + 1]
        if not value:
            raise ConfigError(f"{flag} needs {needs}")
        return value

    def only(self, verb: str, *allowed: str) -> None:
        """Refuse flags `verb` does not take (Hydra's own are `run`'s)."""
        names = [f for i, f in enumerate(self.flags) if f.startswith("-") and not (
            i and self.flags[i - 1] in FLAGS_WITH_VALUE)]
        if unknown := [f for f in names if f not in allowed]:
            takes = ", ".join(allowed) if allowed else "no flags"
            raise ConfigError(f"{verb} does not take {', '.join(unknown)}: it takes Hydra overrides and {takes} "
                              f"(`orchestrator {verb} --help`)")


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
