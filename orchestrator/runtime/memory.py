"""Memory a server holds, read on this host: a container's cgroup, a process tree's resident memory from /proc,
and the memory in use on GPUs from nvidia-smi. Each reading is a lower bound of the peak so far (a peak where the
kernel keeps one); what cannot be read raises RuntimeFailure saying why (run/arm/resources.py records it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from orchestrator.errors import RuntimeFailure
from orchestrator.runtime.spec import MemoryReading

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Most telling first: a kept peak (cgroup v2, then v1), else the usage now. The kernel charges page cache to
# the cgroup, so a model's files read count too: what a memory limit (`arm.memory`) is held against.
_CGROUP_FILES = (("", "memory.peak"), ("memory", "memory.max_usage_in_bytes"),
                 ("", "memory.current"), ("memory", "memory.usage_in_bytes"))
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits"]


def cgroup_memory(pid: int, container_id: str, root: Path = CGROUP_ROOT) -> MemoryReading:
    """The memory of the cgroup that `pid` (a container's first process, seen from here) runs in. The cgroup's
    path must name the container: a pid of another pid namespace is refused, not misread."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError as exc:
        raise RuntimeFailure(f"process {pid} is not visible from here ({exc.strerror})") from exc
    paths = {}  # controller hierarchy ('' for v2) -> the cgroup's path in it
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if container_id in path:
            paths.update({name: path for name in (controllers.split(",") if controllers else [""])})
    for hierarchy, name in _CGROUP_FILES:
        if hierarchy in paths:
            file = root / hierarchy / paths[hierarchy].lstrip("/") / name
            try:
                return MemoryReading(int(file.read_text().split()[0]), f"cgroup {name}")
            except (OSError, ValueError, IndexError):
                continue
    raise RuntimeFailure(f"no cgroup memory file of container {container_id[:12]} under {root}")


def stats_memory(stats: dict[str, Any]) -> MemoryReading:
    """From the Docker stats API's answer: its kept peak (cgroup v1 only), else the usage now."""
    memory = stats.get("memory_stats") or {}
    for key in ("max_usage", "usage"):
        if memory.get(key):
            return MemoryReading(int(memory[key]), f"Docker stats API memory_stats.{key}")
    raise RuntimeFailure("the Docker stats API gives no memory usage (the container has exited?)")


def process_tree_memory(root_pid: int) -> MemoryReading:
    """The resident memory of `root_pid` and every process under it or in its process group, summed (shared
    pages count once per process), or the largest high-water mark (VmHWM) of one of them where that is more."""
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue  # it exited meanwhile
            parents[int(entry.name)], groups[int(entry.name)] = int(fields[1]), int(fields[2])
    if root_pid not in parents:
        raise RuntimeFailure(f"process {root_pid} has exited")
    tree, grown = {root_pid} | {pid for pid, group in groups.items() if group == root_pid}, True
    while grown:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    rss, hwm = 0, 0
    for pid in tree:
        status = _status_kib(pid)
        rss += status.get("VmRSS", 0) << 10
        hwm = max(hwm, status.get("VmHWM", 0) << 10)
    return MemoryReading(max(rss, hwm), "process tree RSS summed (/proc), or its largest VmHWM")


def _status_kib(pid: int) -> dict[str, int]:
    """/proc/PID/status's Vm* lines in KiB; {} for a process gone meanwhile (or a kernel thread)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {name: int(value.split()[0]) for name, _, value in (line.partition(":") for line in text.splitlines())
            if name.startswith("Vm") and value.split()}


def gpu_memory(gpus: str) -> MemoryReading:
    """Memory in use on these GPUs ('all', or indices or UUIDs '0,1'), summed, as nvidia-smi reports it: every
    process's on those devices, not only the arm's (placement gives an arm its GPUs alone)."""
    if shutil.which(GPU_QUERY[0]) is None:
        raise RuntimeFailure("nvidia-smi is not on this host's PATH")
    try:
        done = subprocess.run(GPU_QUERY, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeFailure(f"nvidia-smi failed: {exc}") from exc
    if done.returncode != 0:
        raise RuntimeFailure(f"nvidia-smi failed (exit {done.returncode}): {done.stderr.strip()[-200:]}")
    return MemoryReading(parse_gpu_memory(done.stdout, gpus), "nvidia-smi memory.used of its GPUs")


def parse_gpu_memory(csv: str, gpus: str) -> int:
    """nvidia-smi's 'index, uuid, MiB' lines -> bytes in use on the GPUs named."""
    wanted = {g.strip() for g in gpus.split(",")}
    used = [int(mib) << 20 for index, uuid, mib in (map(str.strip, line.split(",")) for line in csv.splitlines()
                                                     if line.count(",") == 2)
            if gpus == "all" or index in wanted or uuid in wanted]
    if not used:
        raise RuntimeFailure(f"nvidia-smi lists none of the GPUs {gpus}")
    return sum(used)
