"""Docker implementation of the Runtime seam, through the Docker SDK (imported lazily, docker_sdk.py): a local
Docker host or one reached over ssh:// (ssh.py); images built, matched and shipped by docker_images.py."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from orchestrator.errors import ArmStartError, DockerUnavailable, ImageError, RuntimeFailure
from orchestrator.runtime import docker_images
from orchestrator.runtime.docker_sdk import docker_sdk, link_errors
from orchestrator.runtime.host import local_gpus, with_owner
from orchestrator.runtime.memory import cgroup_memory, gpu_memory, stats_memory
from orchestrator.runtime.spec import (
    LABEL_NS,
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
from orchestrator.runtime.ssh import SshLink
from orchestrator.runtime.traits import DOCKER

if TYPE_CHECKING:
    import docker
    import httpx


P = ParamSpec("P")
T = TypeVar("T")


def over_link(method: Callable[Concatenate[DockerRuntime, P], T]) -> Callable[Concatenate[DockerRuntime, P], T]:
    """A Docker host that cannot be reached is a RuntimeFailure (the arm fails, exit 4), not a bug."""
    def wrapper(self: DockerRuntime, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            with self._one_call:
                return method(self, *args, **kwargs)
        except Exception as exc:
            if isinstance(exc, self._errors.DockerException | RuntimeFailure) or not isinstance(exc, link_errors()):
                raise
            hint = (" (the ssh link dropped? its watchdog removes the run's containers there)" if self.ssh else "")
            raise RuntimeFailure(f"the Docker host at {self.host} cannot be reached{hint}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    return wrapper


class DockerRuntime:
    http_transport: httpx.MockTransport | None = None  # servers are reached over the real loopback network
    traits = DOCKER

    def __init__(self, docker_host: str | None = None) -> None:
        sdk = docker_sdk((docker_host or os.environ.get("DOCKER_HOST") or "").startswith("ssh://"))
        self._errors = sdk.errors
        self.host = docker_host or "local"
        # ssh://: the SDK's paramiko transport; ports through ssh tunnels, and a far-side watchdog.
        self.ssh = SshLink(docker_host) if docker_host and docker_host.startswith("ssh://") else None
        # Over ssh, one call at a time: two threads opening channels at once (the environment probe's exec,
        # readiness asking the exit status) had sshd refuse one ("ChannelException(2, 'Connect failed')").
        self._one_call: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if self.ssh else contextlib.nullcontext())
        # A runtime serves one run: each image it resolves is inspected once (the checks, the knob listing and
        # every arm naming it then agree on its id), and the daemon's host name is asked once.
        self._images: dict[str, ImageInfo] = {}
        self._host_name: str | None = None
        self._pids: dict[str, int] = {}  # container id -> its first process, as seen here (memory)
        try:
            self.client: docker.DockerClient = (
                sdk.DockerClient(base_url=docker_host, use_ssh_client=False) if docker_host
                else sdk.from_env())
            self.client.ping()
        except Exception as exc:
            where = docker_host or "DOCKER_HOST or /var/run/docker.sock"
            raise DockerUnavailable(
                f"no Docker host reachable at {where} ({exc}). Start one (`make setup` installs and "
                "starts dockerd on Debian as root) or set runtime.docker_host.") from exc

    # images -----------------------------------------------------------------------------------
    @over_link
    def resolve_image(self, ref: str, build: BuildSpec) -> ImageInfo:
        if ref in self._images:
            return self._images[ref]
        try:
            image = self.client.images.get(ref)
        except self._errors.ImageNotFound:
            absent = f"image '{ref}' is not present on this Docker host{docker_images.closest(self.client, ref)}"
            if not build.context:
                raise ImageError(
                    f"{absent} and the arm has no build.context. No registry is assumed: build or load it "
                    "(`make images` builds the project's own), or set the arm's build.context.", absent) from None
            image = docker_images.build(self.client, ref, build.context, build, absent)
        except self._errors.APIError as exc:
            raise ImageError(f"cannot inspect image '{ref}': {exc}") from exc
        info = self._images[ref] = ImageInfo(ref=ref, id=image.id,
                                             repo_digests=tuple(image.attrs.get("RepoDigests") or ()))
        return info

    # containers -------------------------------------------------------------------------------
    @over_link
    def start(self, spec: ContainerSpec) -> Handle:

        kwargs: dict[str, Any] = dict(
            image=spec.image, command=spec.command or None, name=spec.name, labels=with_owner(spec.labels),
            environment={**spec.env, **spec.secret_env}, detach=True, init=True,
        )
        if spec.network_host:
            kwargs["network_mode"] = "host"
        else:
            kwargs["ports"] = {f"{spec.container_port}/tcp": ("127.0.0.1", None)}
        if spec.gpus:
            kwargs["device_requests"] = _device_requests(spec.gpus)
        if spec.cpuset:
            kwargs["cpuset_cpus"] = spec.cpuset
        if spec.shm_size:
            kwargs["shm_size"] = spec.shm_size
        if spec.memory:  # swap limited to the same: above it the kernel kills the server instead of swapping
            kwargs["mem_limit"] = kwargs["memswap_limit"] = spec.memory
        if spec.ipc_mode:
            kwargs["ipc_mode"] = spec.ipc_mode
        if spec.privileged:
            kwargs["privileged"] = True
        if spec.cap_add:
            kwargs["cap_add"] = list(spec.cap_add)
        if spec.mounts:
            kwargs["volumes"] = _volumes(spec.mounts)
        if self.ssh and f"{LABEL_NS}.run" in spec.labels:  # before the container exists: nothing escapes it
            self.ssh.watch(f"{LABEL_NS}.run={spec.labels[f'{LABEL_NS}.run']}")
        try:
            container = self.client.containers.run(**kwargs)
        except self._errors.APIError as exc:
            raise ArmStartError(f"docker could not start container '{spec.name}': {exc.explanation or exc}") \
                from exc
        handle = Handle(id=container.id, name=spec.name, base_url="")
        try:
            return Handle(id=container.id, name=spec.name, base_url=self._reach(container, spec))
        except BaseException:
            self.stop(handle, 0)
            self.remove(handle)
            raise

    def _reach(self, container: Any, spec: ContainerSpec) -> str:
        """The URL the orchestrator reaches the server at: on a far host, its port (on the far host's
        127.0.0.1) through an ssh tunnel."""
        url = self._base_url(container, spec)
        if not self.ssh or not url:
            return url
        return f"http://127.0.0.1:{self.ssh.tunnel(container.id, int(url.rsplit(':', 1)[1]))}"

    def _base_url(self, container: Any, spec: ContainerSpec) -> str:
        if spec.network_host:
            return f"http://127.0.0.1:{spec.container_port}"
        for _ in range(50):  # the published port shows up a moment after start
            container.reload()
            bindings = (container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{spec.container_port}/tcp")
            if bindings:
                return f"http://127.0.0.1:{bindings[0]['HostPort']}"
            if container.status == "exited":
                # No port any more: the caller learns the exit status and reads the logs through the
                # handle (readiness fails fast on an exit code), and they land in the record.
                return ""
            time.sleep(0.1)
        tail = [line.text for line in self.logs(Handle(container.id, spec.name, ""), tail=50)]
        raise ArmStartError(f"container '{spec.name}' published no port for {spec.container_port}/tcp", tail)

    def _container(self, handle: Handle) -> Any:
        try:
            return self.client.containers.get(handle.id)
        except self._errors.NotFound as exc:
            raise _gone(handle) from exc

    @over_link
    def exit_code(self, handle: Handle) -> int | None:
        container = self._container(handle)  # fetched just now: no reload
        if container.status in ("created", "running", "restarting"):
            return None
        return int(container.attrs["State"]["ExitCode"])

    @over_link
    def exit_reason(self, handle: Handle) -> str | None:
        state = self._container(handle).attrs.get("State", {})
        if state.get("OOMKilled"):
            limit = self._container(handle).attrs.get("HostConfig", {}).get("Memory") or 0
            return f"killed by the kernel: out of memory (OOM) at its memory limit of {limit >> 20} MiB"
        return None

    @over_link
    def logs(self, handle: Handle, tail: int | None = None) -> list[LogLine]:
        lines: list[LogLine] = []
        for stream in ("stdout", "stderr"):
            try:  # by id: no inspect first
                raw = self.client.api.logs(handle.id, stdout=stream == "stdout", stderr=stream == "stderr",
                                           timestamps=True, tail=tail if tail is not None else "all")
            except self._errors.NotFound as exc:
                raise _gone(handle) from exc
            for line in raw.decode("utf-8", "replace").splitlines():
                stamp, _, text = line.partition(" ")
                lines.append(LogLine(stream=stream, timestamp=stamp, text=text))
        lines.sort(key=lambda line: line.timestamp)  # RFC 3339 with fixed-width nanoseconds
        return lines[-tail:] if tail else lines

    @over_link
    def exec(self, handle: Handle, argv: list[str]) -> ExecResult:
        result = self._container(handle).exec_run(argv, demux=False)
        return ExecResult(exit_code=int(result.exit_code), output=(result.output or b"").decode("utf-8", "replace"))

    @over_link
    def run_oneshot(self, image: str, command: list[str], labels: Mapping[str, str],
                    entrypoint: list[str] | None = None, timeout_s: float = 120.0,
                    env: Mapping[str, str] | None = None, gpus: str | None = None,
                    mounts: Sequence[Mount] = ()) -> ExecResult:
        try:
            container = self.client.containers.create(
                image=image, command=command, entrypoint=entrypoint, labels=with_owner(labels), network_mode="none",
                environment=dict(env or {}), device_requests=_device_requests(gpus) if gpus else None,
                volumes=_volumes(mounts) if mounts else None)
        except self._errors.APIError as exc:
            raise RuntimeFailure(f"docker could not create a container of '{image}': {exc.explanation or exc}") \
                from exc
        try:
            container.start()
            try:
                status = int(container.wait(timeout=timeout_s)["StatusCode"])
            except Exception as exc:  # requests' ReadTimeout / ConnectionError
                raise RuntimeFailure(f"a container of '{image}' running {command} did not finish within "
                                     f"{timeout_s:.0f} s ({type(exc).__name__})") from exc
            output = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            if status != 0:
                output += container.logs(stdout=False, stderr=True).decode("utf-8", "replace")[-2000:]
            return ExecResult(exit_code=status, output=output)
        except self._errors.APIError as exc:
            raise RuntimeFailure(f"running a container of '{image}' failed: {exc.explanation or exc}") from exc
        finally:
            with contextlib.suppress(self._errors.NotFound, self._errors.APIError):
                container.remove(force=True)

    @over_link
    def stop(self, handle: Handle, timeout_s: float) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`: `docker stop`, without waiting for the daemon's own teardown
        (about half a second per arm), which `remove` does after the logs are read."""
        import requests  # the Docker SDK's transport

        api = self.client.api  # by id: no inspect first
        try:
            if timeout_s > 0:  # no grace (0: a start cut short): SIGKILL at once; the transport takes no 0 timeout
                with contextlib.suppress(self._errors.APIError):  # not running (it exited), or gone: wait says which
                    api.kill(handle.id, signal="SIGTERM")
                try:
                    return int(api.wait(handle.id, timeout=timeout_s)["StatusCode"])
                except requests.exceptions.RequestException:  # the transport's timeout: the grace is over
                    pass
            with contextlib.suppress(self._errors.APIError):
                api.kill(handle.id)
            return int(api.wait(handle.id, timeout=30)["StatusCode"])
        except self._errors.NotFound:
            return None

    @over_link
    def remove(self, handle: Handle) -> None:
        if self.ssh:
            self.ssh.close_tunnel(handle.id)
        with contextlib.suppress(self._errors.NotFound):
            self.client.api.remove_container(handle.id, force=True)  # by id: no inspect first

    @over_link
    def cleanup(self, labels: Mapping[str, str], keep: Callable[[Mapping[str, str]], bool] | None = None
                ) -> list[str]:
        filters = {"label": [f"{k}={v}" if v else k for k, v in labels.items()]}
        removed = []
        for container in self.client.containers.list(all=True, filters=filters):
            if keep is not None and keep(container.labels):
                continue
            if self.ssh:
                self.ssh.close_tunnel(container.id)
            container.remove(force=True)
            removed.append(container.name)
        if self.ssh and labels.get(f"{LABEL_NS}.run"):
            self.ssh.unwatch(f"{LABEL_NS}.run={labels[f'{LABEL_NS}.run']}")
        return removed

    # many hosts -------------------------------------------------------------------------------
    @over_link
    def host_name(self) -> str:
        """The host name the Docker daemon reports (`docker info`): the far host's, over ssh://."""
        if self._host_name is None:
            self._host_name = str(self.client.info().get("Name", ""))
        return self._host_name

    def _local(self) -> bool:  # the daemon runs on this machine: its containers' cgroups and GPUs are this host's
        return self.ssh is None and (self.host in ("local", "") or self.host.startswith("unix://"))

    def memory(self, handle: Handle) -> MemoryReading:
        """The container's cgroup, read in /sys/fs/cgroup where the daemon is local; else the stats API (about a
        second a call, usage only: a peak sampled, not kept). Not on a remote host: a stats call every half second
        per arm held a channel of its link each, and the link's other calls (a start, a log read) were refused."""
        if not self._local():
            raise RuntimeFailure(f"not sampled on the remote Docker host {self.host} (each reading is a stats call "
                                 "over its link, which the arms' own calls need)")
        try:
            if handle.id not in self._pids:
                self._pids[handle.id] = int(self._container(handle).attrs["State"]["Pid"])
            return cgroup_memory(self._pids[handle.id], handle.id)
        except RuntimeFailure:
            return self._stats_memory(handle)  # another pid namespace (Docker in Docker): the daemon's own account

    @over_link
    def _stats_memory(self, handle: Handle) -> MemoryReading:
        try:
            return stats_memory(self.client.api.stats(handle.id, stream=False))
        except self._errors.APIError as exc:
            raise RuntimeFailure(f"the Docker stats API failed: {exc}") from exc

    def gpu_memory(self, gpus: str) -> MemoryReading:
        if not self._local():
            raise RuntimeFailure(f"its GPUs are on the Docker host {self.host}: not read from here")
        return gpu_memory(gpus)

    @over_link
    def inventory(self) -> Inventory:
        """The Docker host's cores and memory (`docker info`); GPUs from this host's nvidia-smi when the daemon is
        this machine's, unknown on another (its arms name device ids)."""
        info = self.client.info()
        remote = not self._local()
        return Inventory(cpus=tuple(range(int(info.get("NCPU") or 1))), gpus=() if remote else local_gpus(),
                         memory_bytes=info.get("MemTotal"), gpus_known=not remote)

    @over_link
    def ship_image(self, image: ImageInfo, to: Runtime) -> int:
        """Copy an image of this Docker host to another (docker_images.ship); returns the bytes sent."""
        if not isinstance(to, DockerRuntime):
            raise ImageError(f"image {image.ref} cannot be shipped from the Docker host {self.host} to a runtime "
                             "without images")
        return docker_images.ship(image, self.client, self.host, to.client, to.host, to.ssh)


def _gone(handle: Handle) -> RuntimeFailure:
    return RuntimeFailure(f"container '{handle.name}' no longer exists (removed from outside?)")


def _volumes(mounts: Sequence[Mount]) -> dict[str, dict[str, str]]:
    return {m.host: {"bind": m.container, "mode": "ro" if m.read_only else "rw"} for m in mounts}


def _device_requests(gpus: str) -> list[Any]:
    """'all' or device ids '0,1' -> the SDK's GPU device requests (`docker run --gpus`)."""
    import docker.types

    ids = None if gpus == "all" else [g.strip() for g in gpus.split(",")]
    return [docker.types.DeviceRequest(count=-1 if ids is None else None, device_ids=ids, capabilities=[["gpu"]])]
