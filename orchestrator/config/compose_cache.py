"""Composed configs kept between runs: Hydra composes a study in about 0.1-0.2 s (the defaults tree, each
file loaded and merged), the largest part of what `run` does before its first container starts. A config that
composed without a problem is kept in the user's cache (config/compose.py `user_cache_dir`, `composed/`) under
a key of everything its composition reads, and taken from there when all of it is the same again:

- the overrides, in order, and the working directory (Hydra records it in `hydra.runtime.cwd`); a run dir given
  as a plain path is put in after (`run_dirs`): it is new for every run;
- every file under the project's conf/ and the user's config dirs, by path and content;
- the orchestrator's code (the schemas in Hydra's ConfigStore take defaults from several packages), and
  Hydra's plugins;
- the versions of Python, Hydra and OmegaConf.

Nothing is resolved at composition (interpolations such as `${oc.env:HOME}` are resolved later, from the
environment of the run), so the environment is not part of the key. A file is read back only if this user owns
it and nobody else may write it (it is a pickle); anything unreadable is a miss, never an error."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.locations import CONF_DIR

if TYPE_CHECKING:
    from omegaconf import DictConfig

FORMAT = 1  # bumped when what is kept changes
KEPT = 64  # entries; the least recently used go first
RUN_DIRS = ("hydra.run.dir", "hydra.sweep.dir")
PACKAGE = Path(__file__).resolve().parent.parent  # the orchestrator's code
PLAIN_PATH = re.compile(r"[\w./@%+-]+")  # read by Hydra's grammar as this very string


def run_dirs(overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """(the overrides as the key takes them, the run or sweep dir each names): a run dir is new for every run,
    so a plain path given to `hydra.run.dir` or `hydra.sweep.dir` is left out of the key and put back by
    `with_run_dirs`; anything Hydra's grammar would read otherwise (quotes, `${...}`, `null`) stays in it."""
    keyed, named = [], {}
    for override in overrides:
        field, _, value = override.partition("=")
        if field in RUN_DIRS and PLAIN_PATH.fullmatch(value) and not _other_type(value):
            keyed.append(f"{field}=<dir>")
            named[field] = value
        else:
            keyed.append(override)
    return keyed, named


def _other_type(value: str) -> bool:
    """Hydra's grammar reads it as null, a bool or a number (nan, -inf, 1_000, 1e3), not as this string."""
    if value.lower() in ("null", "true", "false"):
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


def with_run_dirs(composed: DictConfig, named: dict[str, str]) -> DictConfig:
    """A kept config with this run's dirs, where Hydra's composition put them (the value, and the override
    as `hydra.overrides.hydra` records it)."""
    for field, value in named.items():
        node = composed.hydra.run if field == "hydra.run.dir" else composed.hydra.sweep
        node.dir = value
        recorded = composed.hydra.overrides.hydra
        for i, override in enumerate(recorded):
            if override.partition("=")[0] == field:
                recorded[i] = f"{field}={value}"
    return composed


def key(overrides: list[str], dirs: list[Path]) -> str:
    import hydra
    import omegaconf

    import hydra_plugins

    digest = hashlib.sha256()
    for part in (str(FORMAT), sys.version, hydra.__version__, omegaconf.__version__, os.getcwd(), *overrides):
        digest.update(part.encode() + b"\0")
    plugins = {Path(p) for p in hydra_plugins.__path__ if Path(p).is_absolute() and Path(p).is_dir()}
    # the whole package: the schemas' defaults come from other packages' modules too (engines' DEFAULT_ENGINE)
    for root in (CONF_DIR, PACKAGE, *sorted(plugins), *dirs):
        digest.update(str(root).encode() + b"\1")
        for path in _files(root):
            digest.update(str(path.relative_to(root)).encode() + b"\2" + path.read_bytes() + b"\3")
    return digest.hexdigest()


def _files(root: Path) -> list[Path]:
    """Every file under `root`, through linked folders as Hydra goes (each real folder once), sorted."""
    found, seen = [], set()
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen or "__pycache__" in Path(folder).parts:
            subfolders[:] = []
            continue
        seen.add(real)
        found += [Path(folder) / name for name in names if (Path(folder) / name).is_file()]
    return sorted(found)


def load(folder: Path, name: str) -> DictConfig | None:
    path = folder / f"{name}.pickle"
    try:
        info = path.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o022 or folder.stat().st_mode & 0o022:
            return None
        with path.open("rb") as handle:
            composed = pickle.load(handle)  # the user's own file, as `store` wrote it
        os.utime(path)  # recently used
    except Exception:  # missing, unreadable, or from code that changed: composed again
        return None
    from omegaconf import DictConfig

    return composed if isinstance(composed, DictConfig) else None


def store(folder: Path, name: str, composed: DictConfig) -> None:
    """Kept for the next run; a cache that cannot be written is no error (the next run composes again)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".composed.", dir=folder)  # mode 0600
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(composed, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, folder / f"{name}.pickle")
        for old in sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime)[:-KEPT]:
            old.unlink(missing_ok=True)
    except Exception:  # not picklable, disk full, raced by another run's pruning: composed again next time
        Path(tmp).unlink(missing_ok=True)
