"""An in-process runtime for unit tests: no Docker, no subprocess, no network.

An image is a Python factory registered by name: given the `ContainerSpec`, it returns a `FakeServer`,
whose `handler` answers the HTTP requests clients send through `http_transport` (an httpx transport
routing `http://<container name>.fake` to that server). It passes the runtime contract suite
(tests/contract), so unit tests of the run, the guard and the fingerprint can use it where they would
otherwise need a container.

Commands it understands, in `exec` and `run_oneshot` (its images have no shell or interpreter):
    fake-printenv NAME...        a JSON object of those names in the server's environment
    fake-exit CODE TEXT          print TEXT, exit with CODE
    fake-exists PATH             True or False: its servers run in this process, on this host's filesystem
Anything else goes to the image's `commands` callable, or exits 127.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from orchestrator.errors import ConfigError, ImageError, RuntimeFailure
from orchestrator.runtime.spec import (
    BuildSpec,
    ContainerSpec,
    ExecResult,
    Handle,
    ImageInfo,
    Inventory,
    LogLine,
    MemoryReading,
    Mount,
    Runtime,
)
from orchestrator.runtime.traits import FAKE

Handler = Callable[[httpx.Request], httpx.Response]
Commands = Callable[[list[str], Mapping[str, str]], ExecResult]


@dataclass
class FakeServer:
    """What a fake container runs. `exit_code` set (by the handler or a test) means it has exited."""

    handler: Handler
    log: list[str] = field(default_factory=list)  # stdout lines, as the server printed them
    commands: Commands | None = None
    exit_code: int | None = None
    stop_code: int = 0  # the status `stop` leaves when it was still running
    memory_bytes: int | None = None  # what `memory` reads (None: not observable)


ImageFactory = Callable[[ContainerSpec], FakeServer]


@dataclass
class _Container:
    spec: ContainerSpec
    server: FakeServer
    logs: list[LogLine] = field(default_factory=list)
    removed: bool = False


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FakeRuntime:
    traits = FAKE
    host = "local"

    def __init__(self, images: Mapping[str, ImageFactory], commands: Commands | None = None,
                 inventory: Inventory | None = None) -> None:
        self.images = dict(images)
        self._inventory = inventory or Inventory(cpus=(0, 1))  # what tests place arms on (GPUs: none)
        self.commands = commands  # for run_oneshot, beyond the built-in ones
        self._containers: dict[str, _Container] = {}
        self._ids = itertools.count(1)
        self.http_transport = httpx.MockTransport(self._route)
        self.gpu_memory_bytes: int | None = None  # what `gpu_memory` reads (None: not observable)

    # images -----------------------------------------------------------------------------------
    def resolve_image(self, ref: str, build: BuildSpec) -> ImageInfo:
        return ImageInfo(ref=ref, id=self._image_id(self._ref_of(ref)))

    def ship_image(self, image: ImageInfo, to: Runtime) -> int:
        raise ImageError(f"image {image.ref}: the fake runtime has one host; nothing is shipped")

    def host_name(self) -> str:
        return socket.gethostname()  # its servers run in this process

    @staticmethod
    def _image_id(ref: str) -> str:
        return f"fake:sha256:{hashlib.sha256(ref.encode()).hexdigest()}"

    def _ref_of(self, image: str) -> str:
        """The registered name of an image given by name or by id."""
        for ref in self.images:
            if image in (ref, self._image_id(ref)):
                return ref
        raise ImageError(f"image '{image}' is not present in the fake runtime; known: {', '.join(self.images)}")

    # containers -------------------------------------------------------------------------------
    def start(self, spec: ContainerSpec) -> Handle:
        if spec.memory:  # traits: no memory limits, refused rather than ignored
            raise ConfigError(f"'{spec.name}': a memory limit ({spec.memory}) cannot be held in the fake runtime")
        server = self.images[self._ref_of(spec.image)](spec)
        handle_id = f"fake-{next(self._ids)}"
        container = _Container(spec, server)
        self._containers[handle_id] = container
        self._drain(container)
        return Handle(id=handle_id, name=spec.name, base_url=f"http://{handle_id}.fake")

    def _route(self, request: httpx.Request) -> httpx.Response:
        container = self._containers.get(request.url.host.removesuffix(".fake"))
        if container is None or container.removed or container.server.exit_code is not None:
            raise httpx.ConnectError("connection refused (the fake server is not running)", request=request)
        try:
            return container.server.handler(request)
        finally:
            self._drain(container)

    def _drain(self, container: _Container) -> None:
        """Move what the server printed into its timestamped log."""
        while container.server.log:
            container.logs.append(LogLine("stdout", _now(), container.server.log.pop(0)))

    def _get(self, handle: Handle) -> _Container:
        container = self._containers.get(handle.id)
        if container is None:
            raise RuntimeFailure(f"container '{handle.name}' is unknown to this runtime")
        return container

    def exit_code(self, handle: Handle) -> int | None:
        return self._get(handle).server.exit_code

    def exit_reason(self, handle: Handle) -> str | None:
        return None

    def logs(self, handle: Handle, tail: int | None = None) -> list[LogLine]:
        container = self._get(handle)
        self._drain(container)
        return container.logs[-tail:] if tail else list(container.logs)

    def exec(self, handle: Handle, argv: list[str]) -> ExecResult:
        container = self._get(handle)
        if container.server.exit_code is not None:
            raise RuntimeFailure(f"container '{handle.name}' is not running")
        env = {**container.spec.env, **container.spec.secret_env}
        return self._command(argv, env, container.server.commands)

    def run_oneshot(self, image: str, command: list[str], labels: Mapping[str, str],
                    entrypoint: list[str] | None = None, timeout_s: float = 120.0,
                    env: Mapping[str, str] | None = None, gpus: str | None = None,
                    mounts: Sequence[Mount] = ()) -> ExecResult:
        self._ref_of(image)  # a missing image fails as it would in Docker
        return self._command([*(entrypoint or []), *command], dict(env or {}), self.commands)

    @staticmethod
    def _command(argv: list[str], env: Mapping[str, str], commands: Commands | None) -> ExecResult:
        if argv[:1] == ["fake-printenv"]:
            return ExecResult(0, json.dumps({name: env.get(name) for name in argv[1:]}) + "\n")
        if argv[:1] == ["fake-exists"] and len(argv) == 2:
            return ExecResult(0, f"{os.path.exists(argv[1])}\n")
        if argv[:1] == ["fake-exit"] and len(argv) == 3:
            return ExecResult(int(argv[1]), argv[2] + "\n")
        if commands is not None:
            return commands(argv, env)
        return ExecResult(127, f"{argv[0] if argv else ''}: not found in the fake image\n")

    def stop(self, handle: Handle, timeout_s: float) -> int | None:
        container = self._containers.get(handle.id)
        if container is None or container.removed:
            return None
        if container.server.exit_code is None:
            container.server.log.append("shutting down")
            container.server.exit_code = container.server.stop_code
        self._drain(container)
        return container.server.exit_code

    def inventory(self) -> Inventory:
        return self._inventory

    def memory(self, handle: Handle) -> MemoryReading:
        held = self._get(handle).server.memory_bytes
        if held is None:
            raise RuntimeFailure("the fake server states no memory")
        return MemoryReading(held, "fake")

    def gpu_memory(self, gpus: str) -> MemoryReading:
        if self.gpu_memory_bytes is None:
            raise RuntimeFailure("the fake runtime states no GPU memory")
        return MemoryReading(self.gpu_memory_bytes, "fake")

    def remove(self, handle: Handle) -> None:
        container = self._containers.get(handle.id)
        if container is not None:
            container.removed = True

    def cleanup(self, labels: Mapping[str, str], keep: Callable[[Mapping[str, str]], bool] | None = None
                ) -> list[str]:
        removed = []
        for container in self._containers.values():
            if container.removed or (keep is not None and keep(container.spec.labels)):
                continue
            if all(container.spec.labels.get(k) == v if v else k in container.spec.labels for k, v in labels.items()):
                if container.server.exit_code is None:
                    container.server.exit_code = 137  # killed, as `docker rm -f` does
                container.removed = True
                removed.append(container.spec.name)
        return removed
