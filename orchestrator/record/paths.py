"""Every file location of a run, in one class (like submitit's JobPaths)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator.errors import RecordError, RecordWriteError

TABLES = ("responses", "logs", "arms", "probes", "digests")


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    def table(self, name: str) -> Path:
        return self.data / name

    @property
    def hydra(self) -> Path:
        return self.root / ".hydra"

    @property
    def prompts_json(self) -> Path:
        """Every prompt's exact text and sha256: the run dir re-runs without the config dirs it came from."""
        return self.root / "prompts.json"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def guard_json(self) -> Path:
        return self.root / "guard.json"  # single-variable checks, declared and observed

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def report_json(self) -> Path:
        return self.root / "report.json"

    @property
    def scratch_root(self) -> Path:
        """Writable directories mounted into arms (caches): scratch/<arm or share name>/<name>."""
        return self.root / "scratch"

    @property
    def reaper_log(self) -> Path:
        return self.root / "reaper.log"  # what the sidecar removed after the orchestrator died (runtime/reaper.py)

    @property
    def meta(self) -> Path:
        return self.root / "run.json"  # study name, run id, baseline: what `compare` needs

    @property
    def bundle(self) -> Path:
        """What `orchestrator bundle` adds to the run dir in its bundle (record/bundle.py); in the run dir
        unpacked from one, never in the original."""
        return self.root / "bundle"

    @property
    def bundle_json(self) -> Path:
        return self.bundle / "bundle.json"  # the commands, each arm's identity and fingerprint, the contexts' digests

    def bundle_context(self, arm: str) -> Path:
        """An arm's build context as it was bundled: a Docker arm's Dockerfile and patches, a process arm's code."""
        return self.bundle / "contexts" / arm

    @property
    def manifest(self) -> Path:
        return self.bundle / "MANIFEST.sha256"  # sha256 per member, `sha256sum -c` from the run dir

    @property
    def manifest_digest(self) -> Path:
        return self.bundle / "MANIFEST.sha256.sha256"  # the manifest's own sha256

    def make(self) -> RunPaths:
        for name in TABLES:
            self.table(name).mkdir(parents=True, exist_ok=True)
        return self


def read_json(path: Path) -> Any:
    """A JSON file of a run dir, or one RecordError line naming it (someone else's run dir may be damaged)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{path} is missing: pass a run dir that `orchestrator run` wrote") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path} cannot be read ({exc}): the run dir is damaged; copy it again from its "
                          "source") from None


def umask() -> int:
    """The process's umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary name in the same folder, then rename: readers never see half a file. The file
    gets the mode open() would give it (0666 less the umask), not mkstemp's 0600: a colleague on the
    machine can read a run unless the run asked for private files (`private_files`, docs/record.md)."""
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """atomic_write_bytes of what `write` writes into the open file (a bundle's zip, written as it streams)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _write_error(path, exc) from exc
        raise


def _write_error(path: Path, exc: OSError) -> RecordWriteError:
    return RecordWriteError(f"the record could not be written at {path}: {exc.strerror or exc}; what was "
                            "written before is kept and readable; free space (or fix the folder) and run again")


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())
