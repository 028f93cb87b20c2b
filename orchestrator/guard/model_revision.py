"""The model an arm serves and its revision, for the matrix key and the `arms` row: the model as its engine
profile reads it from the arm (engines/profile.py `model`), and its revision: a local folder's content hash
("sha256:..." of its files' names, sizes and contents), else the hub revision the arm asks for (`revision`),
else None (not known). A folder is hashed once: each file's hash is kept under the orchestrator's cache dir
with its size and mtime, and read again only when either changed (a 10 GB model is not re-read every run)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config.compose import user_cache_dir
from orchestrator.engines import EngineProfile
from orchestrator.runtime.spec import Mount, map_mounts

CACHE_FOLDER = "model-hashes"


def model_identity(engine: EngineProfile, engine_args: Mapping[str, Any], command: Sequence[str],
                   mounts: list[Mount], process: bool) -> tuple[str | None, str | None]:
    """(model, revision); either None where it is not known. Never raises: an unreadable folder is not known."""
    model = engine.model(engine_args, command)
    if model is None:
        return None, None
    folder = local_folder(model, mounts, process)
    if folder is not None:
        try:
            return model, folder_hash(folder)
        except OSError:
            return model, None
    revision = engine.flag_value(engine_args, "revision")
    return model, None if revision is None else str(revision)


def local_folder(model: str, mounts: list[Mount], process: bool) -> Path | None:
    """The host folder the model is loaded from: under a mount (its host side), or, for a process, a path on
    this host (relative: to the working directory, the process's own). A container's path outside its mounts
    lies in its image, which the image id identifies already; a hub name is no folder."""
    mapped = map_mounts([model], mounts)[0]
    if mapped == model and not process:
        return None
    path = Path(mapped).expanduser()
    return path if path.is_dir() else None


def folder_hash(folder: Path, cache_dir: Path | None = None) -> str:
    """'sha256:<hex>' over every file under `folder` (links followed, as a loader does; names starting with '.'
    skipped: .git, a download tool's .cache): its relative name, size and content hash, in name order."""
    root = folder.resolve()
    cache = (cache_dir or user_cache_dir()) / CACHE_FOLDER / f"{hashlib.sha256(str(root).encode()).hexdigest()}.json"
    try:
        cached: dict[str, list[Any]] = json.loads(cache.read_text())
    except (OSError, ValueError):
        cached = {}
    files: dict[str, list[Any]] = {}
    for where, folders, names in os.walk(root, followlinks=True):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in names:
            if name.startswith("."):
                continue
            path = Path(where, name)
            try:
                stat = path.stat()
            except OSError:  # a dangling link: nothing a loader could read either
                continue
            rel = path.relative_to(root).as_posix()
            known = cached.get(rel)
            if known is not None and known[:2] == [stat.st_size, stat.st_mtime_ns]:
                files[rel] = known
            else:
                with path.open("rb") as stream:
                    files[rel] = [stat.st_size, stat.st_mtime_ns, hashlib.file_digest(stream, "sha256").hexdigest()]
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel][0]}\0{files[rel][2]}\n".encode())
    if files != cached:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps(files))
        partial.replace(cache)  # atomic: two runs hashing the same folder never read half a file
    return f"sha256:{digest.hexdigest()}"
