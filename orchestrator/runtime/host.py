"""What the runtimes need from this host: process-group bookkeeping through /proc, owner labels, free ports,
content hashes of source trees, its GPUs, cores and memory, and how a server is pinned to cores (the process
runtime's state files are process_state.py's)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from orchestrator.errors import ImageError
from orchestrator.runtime.spec import LABEL_NS, Gpu, Inventory, parse_cpuset


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the server binds it a moment later; a race is possible
    and shows up as the server exiting with 'address in use' in its log)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, ...] (field 3 onwards); None: no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22): tells a reused pid apart."""
    stat = _stat(pid)
    return stat[19] if stat else None


def _alive(pid: int, start_time: str | None) -> bool:
    """Running (not a zombie) and, where /proc tells, still the process that was recorded."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or someone else's process now
        return False
    stat = _stat(pid)
    if stat is None:
        return True  # no /proc: trust the pid
    return stat[0] != "Z" and (start_time is None or stat[19] == start_time)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# Who started a container or process (host, PID, the PID's start time): what tells a live run's from a dead
# one's (`orchestrator clean`), with a reused PID told apart.
OWNER_HOST, OWNER_PID, OWNER_START = (f"{LABEL_NS}.owner.{k}" for k in ("host", "pid", "start"))


def with_owner(labels: Mapping[str, str]) -> dict[str, str]:
    pid = os.getpid()
    return {**labels, OWNER_HOST: socket.gethostname(), OWNER_PID: str(pid), OWNER_START: _start_time(pid) or ""}


def owner_alive(labels: Mapping[str, str]) -> bool | None:
    """Whether the orchestrator that started it still runs; None: started on another host, cannot tell."""
    if labels.get(OWNER_HOST) != socket.gethostname():
        return None if labels.get(OWNER_HOST) else False
    pid = labels.get(OWNER_PID, "")
    return pid.isdigit() and _alive(int(pid), labels.get(OWNER_START) or None)


MAX_HASHED_BYTES = 64 << 20


def tree_files(root: Path) -> list[tuple[Path, Path]]:
    """(relative path, path) of every file under root, caches and .git skipped: what identifies a process arm's
    code (tree_hash), and what a bundle holds of an arm's build context."""
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if not ("__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo") or rel.parts[0] == ".git"):
            files.append((rel, path))
    return files


def tree_hash(root: Path, max_bytes: int = MAX_HASHED_BYTES) -> str:
    """sha256 over the relative paths and contents of every file under root (tree_files)."""
    files = tree_files(root)
    total = sum(path.stat().st_size for _, path in files)
    if total > max_bytes:
        raise ImageError(f"build.context {root} holds {total >> 20} MiB: the process runtime hashes it to identify "
                         f"the arm's code (at most {max_bytes >> 20} MiB); point it at the source folder only "
                         "(e.g. arms/reference-engine/refengine), or set it to null")
    digest = hashlib.sha256()
    for rel, path in files:
        digest.update(str(rel).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _status(returncode: int) -> int:
    """Popen's -N (killed by signal N) as a shell and Docker report it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def local_gpus() -> tuple[Gpu, ...]:
    """This host's GPUs by index and UUID (nvidia-smi); none where there is no nvidia-smi or it fails."""
    import subprocess

    if not shutil.which("nvidia-smi"):
        return ()
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = []
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            found.append(Gpu(int(parts[0]), parts[1], parts[2]))
    return tuple(found)


def local_memory_bytes() -> int | None:
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


def local_inventory() -> Inventory:
    """The cores this process may use (its affinity, as a cgroup or `taskset` leaves it), the GPUs, memory."""
    return Inventory(cpus=tuple(sorted(os.sched_getaffinity(0))), gpus=local_gpus(),
                     memory_bytes=local_memory_bytes())


# Run as the server's argv[0:3] when it is pinned: sets the process's CPU affinity, then becomes the server
# (same pid, so the process group and state file stay right); its threads inherit the affinity.
_PIN = "import os, sys; os.sched_setaffinity(0, {cpus}); os.execvp(sys.argv[1], sys.argv[1:])"


def pinned_argv(argv: list[str], cpuset: str | None, python: str) -> list[str]:
    if not cpuset:
        return argv
    return [python, "-c", _PIN.format(cpus=set(parse_cpuset(cpuset))), *argv]
