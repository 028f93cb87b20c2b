"""An arm config as the runtime sees it, resolved once: `resolve_arms` turns each arm of a config into a
`ResolvedArm` (the stand-in applied, the engine that answers, the request fields, interpreter, build spec and
runtime; later its placement and identity), which every stage takes; `container_spec` makes its container or
process spec. The runtime never sees a config; this is where one becomes the other.

The stand-in: `stand_in=IMAGE` runs every arm on IMAGE (the reference engine accepts vLLM's flags),
without GPUs, host mounts or host IPC, so a vLLM study's whole path runs where no GPU is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.compose import PROJECT_ROOT
from orchestrator.config.schema import ArmConfig, BuildConfig, Config, RuntimeConfig
from orchestrator.engines import STAND_IN_ENGINE, EngineProfile, profile_for
from orchestrator.runtime import make_runtime
from orchestrator.runtime.spec import LABEL_NS, BuildSpec, ContainerSpec, Mount, Runtime, cpuset_text, missing_mounts
from orchestrator.runtime.traits import Traits, traits_of


@dataclass(frozen=True)
class Placement:
    """Where an arm of `study.parallel_arms` runs: decided by run/placement.py, carried by its `ResolvedArm`."""

    arm: str
    host: str  # "local" (the study's Docker host) or the arm's host URL
    wave: int  # 1, 2, ...: arms of one wave run at the same time
    gpus: tuple[int, ...] = ()  # indices on that host
    gpu_uuids: tuple[str, ...] = ()
    cpus: tuple[int, ...] = ()
    all_gpus: bool = False

    @property
    def cpuset(self) -> str | None:
        return cpuset_text(self.cpus) if self.cpus else None

    @property
    def gpus_text(self) -> str | None:
        """The value for the runtime (`--gpus device=...`, CUDA_VISIBLE_DEVICES); None: the arm's own."""
        return ",".join(map(str, self.gpus)) if self.gpus else None

    def apply(self, spec: ContainerSpec) -> None:
        """Give the arm's container its own cores, and the GPUs picked for a `gpu_count`."""
        spec.cpuset = self.cpuset
        spec.gpus = self.gpus_text or spec.gpus


@dataclass(frozen=True)
class ResolvedArm:
    """One arm as it will run, made once from the config (`resolve_arms`): run, guard, plan, check,
    probe and reproduce take it, none re-derives it. What is known later is filled in with `dataclasses.replace`:
    `placement` once run/placement.py placed it, `identity` once the runtime resolved its image."""

    name: str
    declared: ArmConfig  # as the study wrote it: the record's config_json, the guard's declared leaves
    arm: ArmConfig  # as it runs: the stand-in's image, without GPUs, host mounts or host IPC
    stand_in_image: str | None  # stand_in=IMAGE, or None
    profile: EngineProfile  # the engine that answers: under a stand-in the reference engine, else the arm's
    # The fields every request carries: the declared engine's, then the arm's, so a stand-in is sent what the
    # study would send its engine.
    request_extra: Mapping[str, Any]
    traits: Traits  # of the runtime it runs on
    interpreter: str | None  # the Python its probes and knob listing run under; None: not knowable
    build: BuildSpec
    identity: str | None = None  # the image id, or a process arm's code identity ("process:..."), once known
    placement: Placement | None = None  # study.parallel_arms: its host, GPUs, cores and wave (run/placement.py)

    @property
    def on_host(self) -> bool:
        """It runs on this host's filesystem, not in an image: a local process."""
        return not self.traits.isolates_filesystem

    def spec(self, image: str, labels: Mapping[str, str], host_env: Mapping[str, str],
             scratch_root: Path | None = None) -> ContainerSpec:
        """Its container or process spec on `image` (`container_spec`), with its placement's cores and GPUs."""
        spec = container_spec(self.name, self.arm, image, labels, host_env, scratch_root)
        if self.placement is not None:
            self.placement.apply(spec)
        return spec


def resolve_arms(config: Config) -> dict[str, ResolvedArm]:
    """Every arm of a config, in order; each must name a known engine (config/validate.py says so first)."""
    return {name: _resolve(name, arm, config) for name, arm in config.arms.items()}


def _resolve(name: str, declared: ArmConfig, config: Config) -> ResolvedArm:
    stand_in = config.stand_in or None
    arm = declared if stand_in is None else dataclasses.replace(
        declared, image=stand_in, build=BuildConfig(), gpus=None, gpu_count=None, volumes=[], ipc_mode=None,
        shm_size=None, network_host=False, privileged=False, cap_add=[])
    own = profile_for(arm.engine)
    traits = traits_of(config.runtime.kind)
    return ResolvedArm(name=name, declared=declared, arm=arm, stand_in_image=stand_in,
                       profile=own if stand_in is None else profile_for(STAND_IN_ENGINE),
                       request_extra=own.extra(arm.request_extra), traits=traits,
                       interpreter=arm_interpreter(arm, not traits.isolates_filesystem), build=build_spec(arm))


def runtime_for(config: RuntimeConfig, docker_host: str | None = None) -> Runtime:
    """The runtime a config names; `docker_host` (an arm's own Docker host) overrides the study's."""
    return make_runtime(config.kind, docker_host=docker_host or config.docker_host,
                        inherit_env=config.inherit_env, venv_on_path=config.venv_on_path, workdir=PROJECT_ROOT)


def runtime_named(kind: str, docker_host: str | None) -> Runtime:
    """The runtime a verb without a study config uses (the config's defaults otherwise)."""
    return runtime_for(RuntimeConfig(kind=kind, docker_host=docker_host))


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
    """`scratch_root`: the run's scratch folder; each scratch dir is SHARE_OR_ARM/NAME under it. The argv after
    the entrypoint is the arm's engine_args in its declared engine's spelling (a stand-in accepts vLLM's)."""
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


def missing_executables(arms: Mapping[str, ResolvedArm]) -> list[str]:
    """Process arms whose interpreter or program (an absolute path) is not there, with how to get it; where
    those are, a read-only mount the arm's argv or env names whose host folder is not (its start would fail)."""
    problems = []
    for name, resolved in arms.items():
        if not resolved.on_host:
            continue
        arm = resolved.arm
        how = arm.build.hint or "install the engine there, or point the arm's command at it"
        found = [f"arm '{name}': {path} does not exist: {how}" for path in {arm.command[0] if arm.command else "",
                                                                              arm.python}
                 if path.startswith("/") and not Path(path).exists()]
        if not found:  # then the folders it is given, as its start would find them
            how = arm.build.hint or "create it, or point the volume at the folder"
            found = [f"{problem}: {how}" for problem in missing_mounts(resolved.spec(arm.image, {}, {}))]
        problems += found
    return problems
