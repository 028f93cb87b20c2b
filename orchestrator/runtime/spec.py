"""The runtime seam: how an arm's server is started, observed and stopped.

A `Runtime` turns a `ContainerSpec` into a running server reachable at `Handle.base_url`.
Implementations: runtime/docker.py (Docker SDK), runtime/process.py (local processes),
runtime/fake.py (in-process, for unit tests). Every implementation must make `stop` safe to call
in every exit path, and `cleanup` able to find what a crashed run left behind by its labels.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx

    from orchestrator.runtime.traits import Traits

# Every container and process a run starts carries `LABEL_NS.run` (and `.arm`, `.study`, `.purpose`):
# how cleanup finds what a crashed run left. The one place the namespace is spelled.
LABEL_NS = "org.orchestrator"


def run_labels(run_id: str, **more: str) -> dict[str, str]:
    """{'org.orchestrator.run': run_id, 'org.orchestrator.<key>': value, ...}"""
    return {f"{LABEL_NS}.run": run_id, **{f"{LABEL_NS}.{key}": value for key, value in more.items()}}
REDACTED = "<redacted>"


@dataclass(frozen=True)
class ImageInfo:
    ref: str  # what the config asked for
    id: str  # content-addressed image id (sha256:...): what the container really runs
    repo_digests: tuple[str, ...] = ()  # registry digests, when the image came from one


@dataclass(frozen=True)
class BuildSpec:
    """How to build an image that is not present (no registry is assumed); `context` is absolute."""

    context: Path | None = None  # None: never build
    dockerfile: str = "Dockerfile"
    args: Mapping[str, str] = field(default_factory=dict)
    interpreter: str = "python3"  # the process runtime: whose installed distributions identify the code


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    read_only: bool = True


def map_mounts(values: list[str], mounts: list[Mount]) -> list[str]:
    """A process has no filesystem namespace: a mount's container path in an argument or env value becomes
    its host path, as a bind mount would show it (/models/tiny-llama -> ~/.cache/orchestrator/models/
    tiny-llama). Read-only cannot be enforced on a process."""
    out = []
    for value in values:
        mount = _mount_of(value, mounts)
        if mount is not None:
            value = mount.host.rstrip("/") + value[len(mount.container.rstrip("/")):]
        out.append(value)
    return out


def named_mounts(values: list[str], mounts: list[Mount]) -> list[Mount]:
    """The mounts a process sees (those `map_mounts` rewrites one of these values through): the others change
    nothing for it, so their host folders need not exist (a template's cache mount that nothing names)."""
    used = {id(mount) for value in values if (mount := _mount_of(value, mounts)) is not None}
    return [mount for mount in mounts if id(mount) in used]


def missing_mounts(spec: ContainerSpec) -> list[str]:
    """Read-only mounts whose host folder is not there, among those the argv or env names (a process sees a
    mount only there; one nothing names, such as a template's Hugging Face cache, is left out); where the folder
    is, each path the argv or env names under it that is not (`/models/nope`: nothing can create it there). The
    process runtime refuses such a spec at start; `check` and `run` say it before (config/arms.py)."""
    arm = spec.labels.get(f"{LABEL_NS}.arm", spec.name)
    values = [*spec.command, *spec.env.values()]
    found = [f"arm '{arm}': mount {m.host} -> {m.container}: {m.host} does not exist on this host"
             for m in named_mounts(values, spec.mounts) if m.read_only and not os.path.exists(m.host)]
    if found:
        return found
    for value in dict.fromkeys(values):
        mount = _mount_of(value, spec.mounts)
        if mount is not None and mount.read_only:
            host = mount.host.rstrip("/") + value[len(mount.container.rstrip("/")):]
            if not os.path.exists(host):
                found.append(f"arm '{arm}': {value} is {host} on this host (mount {mount.host} -> "
                             f"{mount.container}), which does not exist")
    return found


def _mount_of(value: str, mounts: list[Mount]) -> Mount | None:
    """The most specific mount whose container path the value is or lies under."""
    for mount in sorted(mounts, key=lambda m: len(m.container), reverse=True):
        container = mount.container.rstrip("/")
        if value == container or value.startswith(container + "/"):
            return mount
    return None


@dataclass(frozen=True)
class Gpu:
    index: int  # as the host numbers it (nvidia-smi, CUDA_VISIBLE_DEVICES, `--gpus device=`)
    uuid: str  # GPU-...: the same device whatever the numbering
    name: str = ""


@dataclass(frozen=True)
class Inventory:
    """What a host offers arms (run/placement.py places arms on it): its CPU cores by id, its GPUs, its
    memory. `gpus_known` False: the runtime cannot list them there (a remote Docker host): arms name ids."""

    cpus: tuple[int, ...]
    gpus: tuple[Gpu, ...] = ()
    memory_bytes: int | None = None
    gpus_known: bool = True


def cpuset_text(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5': the form of `--cpuset-cpus` and `taskset -c`."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_cpuset(text: str) -> tuple[int, ...]:
    """'0-2,5' -> (0, 1, 2, 5)."""
    cpus: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return tuple(cpus)


@dataclass
class ContainerSpec:
    name: str
    image: str
    command: list[str]
    env: dict[str, str]
    secret_env: dict[str, str]  # passed to the container, never stored or printed
    labels: dict[str, str]
    container_port: int
    network_host: bool = False
    gpus: str | None = None
    shm_size: str | None = None
    memory: str | None = None  # a hard limit, swap included (e.g. "8g"); the kernel kills the server above it
    ipc_mode: str | None = None
    mounts: list[Mount] = field(default_factory=list)
    privileged: bool = False
    cap_add: list[str] = field(default_factory=list)
    process_port_args: list[str] = field(default_factory=list)  # process runtime only ("{port}")
    cpuset: str | None = None  # CPU cores the server may run on ("0-1,4"); None: any (run/placement.py)

    def redacted_env(self) -> dict[str, str]:
        return {**self.env, **{k: REDACTED for k in self.secret_env}}

    def process_command(self) -> str:
        """The command line equivalent to what the process runtime does with this spec ({port}: free)."""
        env = [f"{key}={value}" for key, value in zip(self.env, map_mounts(list(self.env.values()), self.mounts),
                                                      strict=True)]
        env += [f"{key}=<from your env>" for key in self.secret_env]
        if self.gpus != "all":
            env.append(f"CUDA_VISIBLE_DEVICES={self.gpus or ''}")
        pinned = ["taskset", "-c", self.cpuset] if self.cpuset else []
        return shlex.join(["env", *env, *pinned, *map_mounts(self.command, self.mounts), *self.process_port_args])

    def equivalent_command(self, process: bool) -> str:
        return self.process_command() if process else self.docker_run()

    def docker_run(self) -> str:
        """The `docker run` command equivalent to what the Docker runtime does with this spec."""
        argv = ["docker", "run", "-d", "--init", "--name", self.name]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        if self.network_host:
            argv += ["--network", "host"]
        else:
            argv += ["-p", f"127.0.0.1::{self.container_port}"]
        if self.gpus:
            argv += ["--gpus", self.gpus if self.gpus == "all" else f"device={self.gpus}"]
        if self.cpuset:
            argv += ["--cpuset-cpus", self.cpuset]
        if self.shm_size:
            argv += ["--shm-size", self.shm_size]
        if self.memory:
            argv += ["--memory", self.memory, "--memory-swap", self.memory]
        if self.ipc_mode:
            argv += ["--ipc", self.ipc_mode]
        if self.privileged:
            argv.append("--privileged")
        for capability in self.cap_add:
            argv += ["--cap-add", capability]
        for mount in self.mounts:
            argv += ["-v", f"{mount.host}:{mount.container}{':ro' if mount.read_only else ''}"]
        for key, value in self.env.items():
            argv += ["-e", f"{key}={value}"]
        for key in self.secret_env:
            argv += ["-e", key]  # value taken from the caller's environment, as docker does
        return shlex.join([*argv, self.image, *self.command])


@dataclass(frozen=True)
class Handle:
    id: str
    name: str
    base_url: str  # "" when the server exited before it listened: exit_code and logs still work


@dataclass(frozen=True)
class LogLine:
    stream: str  # stdout | stderr
    timestamp: str  # as the runtime reports it (RFC 3339 for Docker)
    text: str


@dataclass(frozen=True)
class MemoryReading:
    """Memory a server holds, in bytes: at least this much now, or the peak so far where the source keeps one."""

    bytes: int
    source: str  # how it was read ("cgroup memory.peak", "nvidia-smi memory.used of its GPUs", ...)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: str

    def last_json_object(self) -> dict[str, Any] | None:
        """The last line of the output that is a JSON object: how the shipped probes and knob listings
        report, after whatever else the engine's imports print."""
        for line in reversed(self.output.strip().splitlines()):
            if line.lstrip().startswith("{"):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    return value
        return None


class Runtime(Protocol):
    # How clients reach the servers this runtime starts: None for a real network (Docker, processes);
    # the fake runtime hands out an httpx transport that routes to its in-process handlers.
    http_transport: httpx.MockTransport | None
    traits: Traits  # what it can do (runtime/traits.py): asked instead of its kind
    host: str  # the Docker host it talks to (its URL), or "local": this machine's processes

    def resolve_image(self, ref: str, build: BuildSpec) -> ImageInfo: ...

    def ship_image(self, image: ImageInfo, to: Runtime) -> int:
        """Copy an image of its host to `to`'s host (of its kind); returns the bytes sent. ImageError where
        `traits.ships_images` is false."""
        ...

    def host_name(self) -> str:
        """The name of the machine its servers run on (a Docker daemon's, the far host's over ssh://)."""
        ...

    def start(self, spec: ContainerSpec) -> Handle: ...

    def exit_code(self, handle: Handle) -> int | None:
        """None while running; the exit status once it has exited."""
        ...

    def exit_reason(self, handle: Handle) -> str | None:
        """Why it exited, when the runtime knows more than the status (Docker: killed for memory)."""
        ...

    def logs(self, handle: Handle, tail: int | None = None) -> list[LogLine]: ...

    def exec(self, handle: Handle, argv: list[str]) -> ExecResult: ...

    def run_oneshot(self, image: str, command: list[str], labels: Mapping[str, str],
                    entrypoint: list[str] | None = None, timeout_s: float = 120.0,
                    env: Mapping[str, str] | None = None, gpus: str | None = None,
                    mounts: Sequence[Mount] = ()) -> ExecResult:
        """Run a short-lived container of `image` with no network (knob listings, fingerprints, kernel
        probes) and return its exit status and stdout (plus the stderr tail when it failed); it is always
        removed, and carries `labels` for `cleanup`. `gpus`: None, "all" or device ids, as for an arm;
        `mounts`: an arm's volumes (a local process sees the host's files as they are)."""
        ...

    def stop(self, handle: Handle, timeout_s: float) -> int | None:
        """Stop (if running) and return the exit code; the container stays for `logs` until remove."""
        ...

    def remove(self, handle: Handle) -> None: ...

    def inventory(self) -> Inventory:
        """The host's CPU cores, GPUs (index and UUID) and memory, for placing arms side by side."""
        ...

    def memory(self, handle: Handle) -> MemoryReading:
        """The memory its container (cgroup) or process tree holds; RuntimeFailure says why it cannot be read."""
        ...

    def gpu_memory(self, gpus: str) -> MemoryReading:
        """The memory in use on these GPUs of this runtime's host ('all' or ids, as `ContainerSpec.gpus`);
        RuntimeFailure says why it cannot be read (no nvidia-smi, a far host)."""
        ...

    def cleanup(self, labels: Mapping[str, str], keep: Callable[[Mapping[str, str]], bool] | None = None
                ) -> list[str]:
        """Remove every container carrying all these labels, except those whose labels `keep` accepts
        (`orchestrator clean`: those of a live run); return their names."""
        ...
