"""runtime: the only code that starts, inspects, execs in, reads logs of, stops, lists and removes
servers. One seam (`spec.Runtime`, with what each runtime can do in `traits.py`), three implementations:
docker.py (Docker SDK, local or over ssh.py; images built and shipped by docker_images.py), process.py (local
processes, host.py; its state dir in process_state.py), fake.py (in-process handlers reached through an httpx
transport, for unit tests). All pass tests/contract (Docker also over ssh://, processes also in a SLURM job).
Besides: memory readings (memory.py), the reaper sidecar (reaper.py), SLURM's job states (slurm.py). Takes its
own spec dataclasses (spec.py), never a config.

May import: errors. Third-party: the Docker SDK, subprocess, paramiko, httpx; never Hydra or a config.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from orchestrator.runtime.spec import Runtime
from orchestrator.runtime.traits import BUILT_IN, runtime_class

KINDS = tuple(BUILT_IN)


def make_runtime(kind: str, *, docker_host: str | None = None, inherit_env: Iterable[str] = (),
                 venv_on_path: bool = True, workdir: Path | None = None) -> Runtime:
    """`inherit_env`, `venv_on_path` and `workdir` (the processes' cwd) matter to the process runtime only. A
    "module:Class" kind (a runtime outside runtime/) is made with these as keywords: it takes those it needs."""
    if kind == "docker":
        from orchestrator.runtime.docker import DockerRuntime

        return DockerRuntime(docker_host)
    if kind == "process":
        from orchestrator.runtime.process import ProcessRuntime

        return ProcessRuntime(inherit_env, venv_on_path, workdir=workdir)
    made: Runtime = runtime_class(kind)(docker_host=docker_host, inherit_env=inherit_env, venv_on_path=venv_on_path,
                                        workdir=workdir)
    return made
