"""Local-process implementation of the Runtime seam: the arm's command runs as a child process of the
orchestrator, for hosts without Docker (SLURM nodes, GPU boxes). docs/runtimes.md has the
user's view; in short:

- no image: `resolve_image` returns an id that hashes the interpreter and the arm's source directory
  (`build.context`), "process:sha256:...";
- `start`: argv = the arm's `command` (a full argv) + engine args + `process_port_args` with "{port}" =
  a free 127.0.0.1 port; env = a few host names (`runtime.inherit_env`) + the arm's env and secrets;
  cwd = the project root; its own session/process group, so `stop` reaches every child;
- stdout/stderr are read line by line by threads and written with RFC 3339 UTC timestamps to files in a
  per-process state dir, which also holds process.json (pid, process group, labels) so `cleanup` finds
  what a killed orchestrator left behind (process_state.py);
- `exec` runs argv next to the server (same env and cwd): a process has no namespace to enter;
- mounts: a mount's container path in the argv or env becomes its host path (`map_mounts`), so an arm
  written for Docker (`-v ~/models:/models`, `--model /models/x`) runs as a process unchanged; a mount
  that nothing names changes nothing for a process, and its host folder need not exist.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

from orchestrator.errors import ArmStartError, ConfigError, ImageError, RuntimeFailure
from orchestrator.runtime.host import _kill_group, _status, free_port, local_inventory, pinned_argv, tree_hash
from orchestrator.runtime.memory import gpu_memory, process_tree_memory
from orchestrator.runtime.process_state import (
    default_state_dir,
    kill_recorded,
    matching,
    new_folder,
    pump,
    read_logs,
    remove_folder,
    write_record,
)
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
    map_mounts,
    missing_mounts,
)
from orchestrator.runtime.traits import CODE_PREFIX, PROCESS

# Cache dirs a process gets of its own (in its state dir) unless its env names them, as a container has
# its own filesystem: without this, two process arms would share the libraries' default caches in $HOME
# and /tmp (vLLM, Hugging Face and FlashInfer live under XDG_CACHE_HOME; guard/caches.py checks the rest).
PRIVATE_CACHE_ENV = ("XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH",
                     "FLASHINFER_WORKSPACE_BASE")


# Printed by the arm's interpreter: its version and its installed distributions, sorted (no paths).
_DISTRIBUTIONS = ("import sys, importlib.metadata as m; print(sys.version.split()[0]); "
                  "print('\\n'.join(sorted({f\"{d.metadata['Name'].lower()}=={d.version}\" "
                  "for d in m.distributions() if d.metadata['Name']})))")


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes]
    name: str
    dir: Path
    env: dict[str, str]
    cpuset: str | None = None  # an exec next to it runs on the same cores (the probe sees what it sees)
    mounts: list[Mount] = field(default_factory=list)  # an exec's argv is mapped as the arm's (map_mounts)
    readers: list[threading.Thread] = field(default_factory=list)


class ProcessRuntime:
    http_transport: httpx.MockTransport | None = None  # servers are reached over the real loopback network
    traits = PROCESS
    host = "local"

    def __init__(self, inherit_env: Iterable[str], venv_on_path: bool = True, state_dir: str | Path | None = None,
                 host_env: Mapping[str, str] | None = None, workdir: Path | None = None) -> None:
        """`inherit_env`: the host env names a process gets (the one default list is the config's,
        `runtime.inherit_env`); `workdir`: the processes' cwd (default: this process's)."""
        self.inherit_env = tuple(inherit_env)
        self.workdir = workdir or Path.cwd()
        self.venv_on_path = venv_on_path
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.host_env = os.environ if host_env is None else host_env
        self._procs: dict[str, _Proc] = {}
        self._environments: dict[str, str] = {}

    # images -----------------------------------------------------------------------------------
    def ship_image(self, image: ImageInfo, to: Runtime) -> int:
        raise ImageError(f"arm code {image.ref}: a local process has no image to ship; it runs on this host only")

    def host_name(self) -> str:
        return socket.gethostname()

    def resolve_image(self, ref: str, build: BuildSpec) -> ImageInfo:
        """No image: a code identity (docs/conventions.md) from what runs, never from where it lies: the
        arm's interpreter's version and installed distributions, and the content of `build.context`.
        The same code on two machines gives the same id. A ref that is such an id (`reproduce` pins
        one) must match what is installed here."""
        digest = hashlib.sha256(self._environment(build.interpreter).encode())
        if build.context:
            source = build.context
            if not source.is_dir():
                raise ImageError(f"process arm '{ref}': build.context {source} is not a directory (the process "
                                 "runtime hashes it to identify the arm's code)")
            digest.update(tree_hash(source).encode())
        found = f"{CODE_PREFIX}sha256:{digest.hexdigest()}"
        if ref.startswith(f"{CODE_PREFIX}sha256:") and ref != found:
            raise ImageError(f"the code that ran ({ref[:27]}...) is not what is installed here ({found[:27]}...): "
                             f"{build.interpreter} has other distributions or versions, or the source differs. "
                             "Install what the original run's fingerprint lists, or pass --by-tag to run anyway")
        return ImageInfo(ref=ref, id=found)

    def _environment(self, interpreter: str) -> str:
        """'3.11.7\nname==version\n...' of an interpreter (as the arm's PATH finds it), once per runtime."""
        if interpreter not in self._environments:
            try:
                done = subprocess.run([interpreter, "-c", _DISTRIBUTIONS], capture_output=True, text=True,
                                      timeout=120, env=self.base_env(), cwd=self.workdir)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ImageError(f"cannot run the arm's interpreter {interpreter}: {exc}") from exc
            if done.returncode != 0:
                raise ImageError(f"the arm's interpreter {interpreter} failed: {done.stderr.strip()[-300:]}")
            self._environments[interpreter] = done.stdout
        return self._environments[interpreter]

    # environment ------------------------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        env = {name: self.host_env[name] for name in self.inherit_env if name in self.host_env}
        if self.venv_on_path:
            env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *filter(None, [env.get("PATH")])])
        return env

    def _env(self, gpus: str | None, env: Mapping[str, str], cache_root: Path | None = None) -> dict[str, str]:
        base = self.base_env()
        if cache_root is not None:
            base.update({name: str(cache_root / name.lower()) for name in PRIVATE_CACHE_ENV})
        if gpus is None:
            base["CUDA_VISIBLE_DEVICES"] = ""  # as in a container without --gpus: no GPU visible
        elif gpus != "all":
            base["CUDA_VISIBLE_DEVICES"] = gpus
        elif "CUDA_VISIBLE_DEVICES" in self.host_env:  # "all": what the host (or SLURM) allotted
            base["CUDA_VISIBLE_DEVICES"] = self.host_env["CUDA_VISIBLE_DEVICES"]
        return {**base, **env}

    def _refuse(self, spec: ContainerSpec) -> None:
        arm = spec.labels.get(f"{LABEL_NS}.arm", spec.name)
        problems = missing_mounts(spec)
        if spec.memory:
            problems.append(f"arm '{arm}': a memory limit ({spec.memory}) needs the docker runtime; a local "
                            "process cannot be held to one here")
        if getattr(spec, "privileged", False) or getattr(spec, "cap_add", None):
            problems.append(f"arm '{arm}': privileged/cap_add cannot be granted to a local process")
        if not spec.command or spec.command[0].startswith("-"):
            first = f" (the argv would start with the flag '{spec.command[0]}')" if spec.command else ""
            problems.append(f"arm '{arm}': the process runtime needs the arm's command as a full argv "
                            f"(e.g. [python3, -m, refengine]); there is no image entrypoint{first}. "
                            "For the reference engine use arm@arms.NAME=reference_process")
        if problems:
            raise ConfigError(problems)

    # processes --------------------------------------------------------------------------------
    def start(self, spec: ContainerSpec) -> Handle:
        self._refuse(spec)
        port = free_port() if spec.process_port_args else spec.container_port
        argv = pinned_argv([*map_mounts(spec.command, spec.mounts),
                            *(arg.replace("{port}", str(port)) for arg in spec.process_port_args)],
                           spec.cpuset, sys.executable)
        handle_id = f"proc-{secrets.token_hex(6)}"
        folder = new_folder(self.state_dir, handle_id)
        env = self._env(spec.gpus, dict(zip(spec.env, map_mounts(list(spec.env.values()), spec.mounts),
                                            strict=True)) | spec.secret_env, folder / "cache")
        try:
            popen = subprocess.Popen(argv, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            remove_folder(folder)
            raise ArmStartError(f"could not start '{spec.name}' ({argv[0]}): {exc}") from exc
        proc = _Proc(popen, spec.name, folder, env, spec.cpuset, list(spec.mounts))
        self._procs[handle_id] = proc
        write_record(folder, popen.pid, spec.name, spec.labels, argv, port)
        for stream, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            assert pipe is not None
            thread = threading.Thread(target=pump, args=(pipe, folder / f"{stream}.log"), daemon=True,
                                      name=f"{spec.name}-{stream}")
            thread.start()
            proc.readers.append(thread)
        return Handle(id=handle_id, name=spec.name, base_url=f"http://127.0.0.1:{port}")

    def _proc(self, handle: Handle) -> _Proc:
        try:
            return self._procs[handle.id]
        except KeyError:
            raise RuntimeFailure(f"process '{handle.name}' no longer exists (removed, or started by another "
                                 "orchestrator)") from None

    def pid(self, handle: Handle) -> int:
        return self._proc(handle).popen.pid

    def _drain(self, proc: _Proc, timeout_s: float = 5.0) -> None:
        """Once the process has exited, wait for the reader threads to write its last lines."""
        deadline = time.monotonic() + timeout_s
        for thread in proc.readers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def exit_reason(self, handle: Handle) -> str | None:
        return None  # a signal's number is all a process's status tells

    def exit_code(self, handle: Handle) -> int | None:
        proc = self._proc(handle)
        code = proc.popen.poll()
        if code is None:
            return None
        self._drain(proc)
        return _status(code)

    def logs(self, handle: Handle, tail: int | None = None) -> list[LogLine]:
        proc = self._proc(handle)
        if proc.popen.poll() is not None:
            self._drain(proc)
        return read_logs(proc.dir, tail)

    def exec(self, handle: Handle, argv: list[str]) -> ExecResult:
        proc = self._proc(handle)
        if proc.popen.poll() is not None:
            raise RuntimeFailure(f"process '{handle.name}' is not running (exit {_status(proc.popen.returncode)})")
        try:
            done = subprocess.run(pinned_argv(map_mounts(argv, proc.mounts), proc.cpuset, sys.executable),
                                  cwd=self.workdir, env=proc.env,
                                  stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        except FileNotFoundError as exc:
            return ExecResult(exit_code=127, output=f"{argv[0]}: {exc.strerror}\n")
        except subprocess.TimeoutExpired as exc:
            raise RuntimeFailure(f"exec of {argv[:3]} in '{handle.name}' did not finish within 600 s") from exc
        return ExecResult(exit_code=_status(done.returncode), output=done.stdout.decode("utf-8", "replace"))

    def run_oneshot(self, image: str, command: list[str], labels: Mapping[str, str],
                    entrypoint: list[str] | None = None, timeout_s: float = 120.0,
                    env: Mapping[str, str] | None = None, gpus: str | None = None,
                    mounts: Sequence[Mount] = ()) -> ExecResult:
        """argv = entrypoint + command (there is no image entrypoint to fall back on), with the base
        env only (no arm env: put `env NAME=VALUE` in the entrypoint), cwd the project root. Unlike a
        container it is not cut off from the network."""
        argv = [*(entrypoint or []), *command]
        if not argv:
            raise RuntimeFailure(f"nothing to run for '{image}': the process runtime needs entrypoint + command")
        folder = new_folder(self.state_dir, f"oneshot-{secrets.token_hex(6)}")
        try:
            try:
                popen = subprocess.Popen(argv, cwd=self.workdir, env=self._env(gpus, env or {}),
                                         stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            except OSError as exc:
                raise RuntimeFailure(f"could not run {argv[0]} for '{image}': {exc}") from exc
            write_record(folder, popen.pid, folder.name, labels, argv)
            try:
                out, err = popen.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired as exc:
                raise RuntimeFailure(f"{argv[:4]} for '{image}' did not finish within {timeout_s:.0f} s") from exc
            finally:
                _kill_group(popen.pid, signal.SIGKILL)
                if popen.poll() is None:
                    popen.wait()
            status = _status(popen.returncode)
            output = out.decode("utf-8", "replace")
            if status != 0:
                output += err.decode("utf-8", "replace")[-2000:]
            return ExecResult(exit_code=status, output=output)
        finally:
            remove_folder(folder)

    def stop(self, handle: Handle, timeout_s: float) -> int | None:
        """SIGTERM to the process group, SIGKILL after timeout_s; then any child left in the group."""
        proc = self._procs.get(handle.id)
        if proc is None:
            return None
        popen = proc.popen
        if popen.poll() is None:
            _kill_group(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(popen.pid, signal.SIGKILL)
                popen.wait()
        _kill_group(popen.pid, signal.SIGKILL)  # children that outlived the leader
        self._drain(proc)
        return _status(popen.returncode)

    def inventory(self) -> Inventory:
        return local_inventory()

    def memory(self, handle: Handle) -> MemoryReading:
        return process_tree_memory(self._proc(handle).popen.pid)

    def gpu_memory(self, gpus: str) -> MemoryReading:
        return gpu_memory(gpus)

    def remove(self, handle: Handle) -> None:
        proc = self._procs.get(handle.id)
        if proc is None:
            return
        if proc.popen.poll() is None:
            self.stop(handle, 0)
        _kill_group(proc.popen.pid, signal.SIGKILL)
        self._drain(proc, 1.0)
        remove_folder(proc.dir)
        del self._procs[handle.id]

    def cleanup(self, labels: Mapping[str, str], keep: Callable[[Mapping[str, str]], bool] | None = None
                ) -> list[str]:
        """Kill and forget every process (of any orchestrator on this host, under this state dir) whose
        recorded labels match: a value of "" matches any value, as Docker's label filter does."""
        removed: list[str] = []
        for folder, record in matching(self.state_dir, labels, keep):
            ours = next((h for h, p in self._procs.items() if p.dir == folder), None)
            if ours is not None:
                self.remove(Handle(ours, record.get("name", ""), ""))
            else:
                kill_recorded(record)
                remove_folder(folder)
            removed.append(str(record.get("name", folder.name)))
        return removed


