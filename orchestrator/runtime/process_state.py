"""The process runtime's state dir: one folder per process it starts, holding process.json (pid, process group,
start time, labels, argv, port; no environment) and the process's stdout.log and stderr.log, each line prefixed
with its arrival time. A container's daemon keeps this for Docker; for a process it is what `logs` reads and
what `cleanup` finds of another orchestrator on this host, even one killed with SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from orchestrator.runtime.host import _alive, _group_exists, _kill_group, _start_time, with_owner
from orchestrator.runtime.spec import LogLine

STATE_ENV = "ORCHESTRATOR_PROCESS_DIR"  # where process state dirs live (default below)
RECORD = "process.json"
STREAMS = ("stdout", "stderr")


def default_state_dir() -> Path:
    """$ORCHESTRATOR_PROCESS_DIR, else $XDG_RUNTIME_DIR/orchestrator-processes, else
    TMPDIR/orchestrator-processes-UID: one folder per started process, removed by `remove`."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    if os.environ.get("XDG_RUNTIME_DIR") and Path(os.environ["XDG_RUNTIME_DIR"]).is_dir():
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "orchestrator-processes"
    return Path(tempfile.gettempdir()) / f"orchestrator-processes-{os.getuid()}"


def new_folder(state_dir: Path, name: str) -> Path:
    """The folder of a process about to start: only its owner may read it (its logs may name secrets)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = state_dir / name
    folder.mkdir(mode=0o700)
    return folder


def remove_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def write_record(folder: Path, pid: int, name: str, labels: Mapping[str, str], argv: list[str],
                 port: int | None = None) -> None:
    """process.json of a process just started (its own group's leader), with who started it (`with_owner`)."""
    record: dict[str, Any] = {"pid": pid, "pgid": pid, "start_time": _start_time(pid), "name": name,
                              "labels": with_owner(labels), "argv": argv}
    if port is not None:
        record["port"] = port
    tmp = folder / f"{RECORD}.tmp"
    tmp.write_text(json.dumps(record, sort_keys=True))
    os.replace(tmp, folder / RECORD)  # a reader never sees half a record


def rfc3339_ns(ns: int) -> str:
    """2024-05-01T12:00:00.123456789Z: fixed width, so text order is time order (as Docker's)."""
    seconds, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def pump(pipe: IO[bytes], path: Path) -> None:
    """Copy a pipe to `path` line by line, each line prefixed with its arrival time."""
    with path.open("ab", buffering=0) as out:
        for raw in iter(pipe.readline, b""):
            text = raw.rstrip(b"\n").rstrip(b"\r")
            out.write(rfc3339_ns(time.time_ns()).encode() + b" " + text + b"\n")
    with contextlib.suppress(OSError):
        pipe.close()


def read_logs(folder: Path, tail: int | None = None) -> list[LogLine]:
    """Both streams' lines in time order (the last `tail` of them), as Docker's logs with timestamps."""
    lines: list[LogLine] = []
    for stream in STREAMS:
        path = folder / f"{stream}.log"
        if not path.is_file():
            continue
        for raw in path.read_text("utf-8", "replace").split("\n")[:-1]:
            stamp, _, text = raw.partition(" ")
            lines.append(LogLine(stream=stream, timestamp=stamp, text=text))
    lines.sort(key=lambda line: line.timestamp)
    return lines[-tail:] if tail else lines


def matching(state_dir: Path, labels: Mapping[str, str], keep: Callable[[Mapping[str, str]], bool] | None
             ) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(folder, record) of every process under the state dir whose recorded labels match, as Docker's label
    filter matches (a value of "" matches any value), less those `keep` keeps."""
    if not state_dir.is_dir():
        return
    for record_path in sorted(state_dir.glob(f"*/{RECORD}")):
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue
        recorded = record.get("labels") or {}
        if not all(key in recorded and (not value or recorded[key] == value) for key, value in labels.items()):
            continue
        if keep is None or not keep(recorded):
            yield record_path.parent, record


def kill_recorded(record: Mapping[str, Any]) -> None:
    """SIGKILL a recorded process and its group, if it still runs (a reused pid is told apart by start time)."""
    pid, pgid = int(record["pid"]), int(record.get("pgid") or record["pid"])
    if _alive(pid, record.get("start_time")) or _group_exists(pgid):
        _kill_group(pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
