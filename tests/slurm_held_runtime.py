"""The process runtime as it runs in a SLURM job (a sweep with hydra/launcher=slurm* and runtime=process: the
study, and so its runtime, runs inside the job), for the runtime contract (tests/contract). A driver started
with `srun` (as submitit's sbatch script starts a sweep job's Python) holds a ProcessRuntime inside the job;
`HeldRuntime`, here, sends it each call of the Runtime protocol over a local socket and returns what it
answered or raises what it raised. So every server of the contract is started, watched and stopped by a
process of the job, in the job's environment, and is one of the job's processes (`job_pids`, SLURM's own
list). Needs a SLURM cluster on this node (tests/hosts.py).

    python -m tests.slurm_held_runtime ADDRESS STATE_DIR    (the driver; what `srun` runs)
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from orchestrator.config.locations import INHERIT_ENV
from orchestrator.runtime.process import ProcessRuntime
from orchestrator.runtime.spec import Runtime
from orchestrator.runtime.traits import PROCESS

ROOT = Path(__file__).resolve().parents[1]
AUTHKEY_ENV = "CONTRACT_HELD_AUTHKEY"
START_TIMEOUT_S = 120.0  # srun to the driver connected: the job waits for the node while others run


def _in_job(state_dir: str) -> ProcessRuntime:
    """What a HeldRuntime is where it is sent as an argument (ship_image's `to`): a runtime of the job."""
    return ProcessRuntime(INHERIT_ENV, state_dir=state_dir)


class HeldRuntime:
    """A ProcessRuntime in a SLURM job of its own (`srun`), reached from here."""

    http_transport = None  # the job is on this node: its servers listen on this host's loopback
    traits = PROCESS
    host = "local"

    def __init__(self, state_dir: Path, env: Mapping[str, str]) -> None:
        """`env`: the environment srun is given (SLURM_CONF, and what the job's orchestrator has in its env)."""
        self.state_dir = state_dir
        self._env = dict(env)
        self._lock = threading.Lock()  # one call at a time on the connection
        folder = self._folder = tempfile.mkdtemp(prefix="held-", dir="/tmp")  # a unix socket path: 108 bytes
        authkey = secrets.token_bytes(16)
        listener = Listener(f"{folder}/driver.sock", "AF_UNIX", authkey=authkey)
        self._log = Path(folder) / "srun.log"
        with self._log.open("wb") as log:
            self._srun = subprocess.Popen(
                ["srun", "--job-name=contract-held", "--nodes=1", "--ntasks=1", "--quiet",
                 sys.executable, "-m", "tests.slurm_held_runtime", listener.address, str(state_dir)],
                cwd=ROOT, env={**self._env, AUTHKEY_ENV: authkey.hex()}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT)
        accepted: list[Connection] = []
        waiting = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
        waiting.start()
        waiting.join(START_TIMEOUT_S)
        listener.close()
        if not accepted:
            self._srun.kill()
            raise RuntimeError(f"the srun driver did not connect in {START_TIMEOUT_S:.0f} s: "
                               f"{self._log.read_text()[-2000:]}")
        self._conn = accepted[0]
        hello = self._conn.recv()
        self.job: str = hello["job"]  # SLURM_JOB_ID, as the job sees it
        self.node: str = hello["node"]  # SLURMD_NODENAME
        self.driver_pid: int = hello["pid"]  # the orchestrator's side in the job: what its servers descend from

    def __reduce__(self) -> tuple[Callable[[str], ProcessRuntime], tuple[str]]:
        return _in_job, (str(self.state_dir),)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._conn.send((name, args, kwargs))
            how, value = self._conn.recv()
        if how == "raise":
            raise value
        return value

    def fresh(self) -> HeldRuntime:
        """Another job's runtime over the same state dir (`orchestrator clean` in a job of its own)."""
        return HeldRuntime(self.state_dir, self._env)

    def job_pids(self) -> set[int]:
        """The job's processes, as SLURM tracks them (`scontrol listpids`): what it signals at a cancel."""
        listed = subprocess.run(["scontrol", "listpids", self.job], env=self._env, capture_output=True, text=True,
                                check=True).stdout.splitlines()
        return {int(line.split()[0]) for line in listed[1:] if line.split()}

    def close(self) -> None:
        """The driver ends when its connection does; so does the job (srun returns)."""
        self._conn.close()
        try:
            self._srun.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._srun.kill()
            self._srun.wait()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Each method of the Runtime protocol, and the process runtime's `pid`: the call, made in the job."""
        if name not in CALLS:
            raise AttributeError(name)
        return lambda *args, **kwargs: self._call(name, *args, **kwargs)


CALLS = {name for name in vars(Runtime) if not name.startswith("_")} - {"traits", "http_transport"} | {"pid"}


def serve(address: str, state_dir: str) -> None:
    """The driver, in the job: one ProcessRuntime, each call run and answered until the connection ends."""
    runtime = _in_job(state_dir)
    with Client(address, "AF_UNIX", authkey=bytes.fromhex(os.environ.pop(AUTHKEY_ENV))) as conn:
        conn.send({"job": os.environ["SLURM_JOB_ID"], "node": os.environ["SLURMD_NODENAME"], "pid": os.getpid()})
        while True:
            try:
                name, args, kwargs = conn.recv()
            except EOFError:
                return
            try:
                conn.send(("ok", getattr(runtime, name)(*args, **kwargs)))
            except Exception as exc:  # the caller raises it: the contract matches its type and words
                conn.send(("raise", exc))


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
