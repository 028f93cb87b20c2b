"""An arm config as the runtime sees it: the stand-in applied, its build spec, its container spec, the
runtime a config names. The runtime never sees a config; this is where one becomes the other.

The stand-in: `stand_in=IMAGE` runs every arm on IMAGE (the reference engine accepts vLLM's flags),
without GPUs, host mounts or host IPC, so a vLLM study's whole path runs where no GPU is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from orchestrator.config.compose import PROJECT_ROOT
from orchestrator.config.schema import ArmConfig, BuildConfig, Config, RuntimeConfig, RuntimeKind
from orchestrator.engines import profile_for
from orchestrator.runtime import make_runtime
from orchestrator.runtime.spec import LABEL_NS, BuildSpec, ContainerSpec, Mount, Runtime, missing_mounts


def effective_arm(arm: ArmConfig, stand_in: str | None) -> ArmConfig:
    if not stand_in:
        return arm
    return dataclasses.replace(arm, image=stand_in, build=BuildConfig(), gpus=None, gpu_count=None, volumes=[],
                               ipc_mode=None, shm_size=None, network_host=False, privileged=False, cap_add=[])


def runtime_for(config: RuntimeConfig, docker_host: str | None = None) -> Runtime:
    """The runtime a config names; `docker_host` (an arm's own Docker host) overrides the study's."""
    return make_runtime(config.kind.value, docker_host=docker_host or config.docker_host,
                        inherit_env=config.inherit_env, venv_on_path=config.venv_on_path, workdir=PROJECT_ROOT)


def runtime_named(kind: str, docker_host: str | None) -> Runtime:
    """The runtime a verb without a study config uses (the config's defaults otherwise)."""
    return runtime_for(RuntimeConfig(kind=RuntimeKind(kind), docker_host=docker_host))


def build_spec(arm: ArmConfig) -> BuildSpec:
    """The runtime's build spec: a relative context resolves against the project root; the interpreter the
    arm's command runs under identifies a process arm's code (only the process runtime reads it)."""
    build = arm.build
    context = (PROJECT_ROOT / build.context).resolve() if build.context else None
    return BuildSpec(context=context, dockerfile=build.dockerfile, args=dict(build.args),
                     interpreter=arm_interpreter(arm, process=True) or arm.python)


PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?$")
DEFAULT_PYTHON = "python3"  # ArmConfig.python's default: in an image, the image's own python3


def arm_interpreter(arm: ArmConfig, process: bool) -> str | None:
    """The Python the arm's engine runs under, where its probes and knob listing must run: in an image, its
    `python`; as a process, the interpreter its command names (`VENV/bin/python3 -m ...`, or a console script
    whose shebang names it), else an explicit `python`. None: not knowable (never the orchestrator's own)."""
    if not process:
        return arm.python
    program = arm.command[0] if arm.command else ""
    if PYTHON_NAME.match(Path(program).name):
        return program
    shebang = _shebang_python(program)
    if shebang is not None:
        return shebang
    return arm.python if arm.python != DEFAULT_PYTHON else None


def _shebang_python(program: str) -> str | None:
    """`#!/venv/bin/python3` of a script such as a venv's `vllm`; None for a binary or no such file."""
    path = Path(program) if Path(program).is_absolute() else PROJECT_ROOT / program
    try:
        with path.open("rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    words = first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []
    if words and Path(words[0]).name == "env":
        words = words[1:]
    return words[0] if words and PYTHON_NAME.match(Path(words[0]).name) else None


def container_spec(arm_name: str, arm: ArmConfig, image: str, labels: Mapping[str, str],
                   host_env: Mapping[str, str], scratch_root: Path | None = None) -> ContainerSpec:
    """`scratch_root`: the run's scratch folder; each scratch dir is SHARE_OR_ARM/NAME under it."""
    scratch = [] if scratch_root is None else [
        Mount(str(scratch_root / (s.share or arm_name) / name), s.container, read_only=False)
        for name, s in arm.scratch.items()]
    return ContainerSpec(
        name=f"{labels.get(f'{LABEL_NS}.run', 'run')}-{arm_name}"[:120],
        image=image,
        command=[*arm.command, *profile_for(arm.engine).argv(arm.engine_args)],
        env=dict(arm.env),
        secret_env={k: host_env[k] for k in arm.secret_env if k in host_env},
        labels={**labels, f"{LABEL_NS}.arm": arm_name},
        container_port=arm.port,
        network_host=arm.network_host,
        gpus=arm.gpus,
        shm_size=arm.shm_size,
        memory=arm.memory,
        ipc_mode=arm.ipc_mode,
        mounts=[*(Mount(v.host, v.container, v.read_only) for v in arm.volumes), *scratch],
        privileged=arm.privileged,
        cap_add=list(arm.cap_add),
        process_port_args=list(arm.process_port_args),
    )


def missing_executables(config: Config) -> list[str]:
    """Process arms whose interpreter or program (an absolute path) is not there, with how to get it; where
    those are, a read-only mount the arm's argv or env names whose host folder is not (its start would fail)."""
    if config.runtime.kind is not RuntimeKind.process:
        return []
    problems = []
    for name, arm in config.arms.items():
        how = arm.build.hint or "install the engine there, or point the arm's command at it"
        found = [f"arm '{name}': {path} does not exist: {how}" for path in {arm.command[0] if arm.command else "",
                                                                              arm.python}
                 if path.startswith("/") and not Path(path).exists()]
        if not found:  # then the folders it is given, as its start would find them
            how = arm.build.hint or "create it, or point the volume at the folder"
            found = [f"{problem}: {how}" for problem in missing_mounts(container_spec(name, arm, arm.image, {}, {}))]
        problems += found
    return problems
