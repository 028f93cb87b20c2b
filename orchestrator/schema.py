"""Config schemas: one dataclass per YAML node, registered in Hydra's ConfigStore.

Every YAML under conf/ is merged onto these, so an unknown key or a wrong type fails composition;
`config.load` turns such failures into a ConfigError that names the key, the file and the choices.
Cross-field checks live in `__post_init__` and collect every problem before raising once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from orchestrator.errors import ConfigError


class PhaseKind(str, Enum):
    sequential = "sequential"  # one request at a time, each waits for the previous answer
    concurrent = "concurrent"  # `repeats` identical requests released together, `batches` times


class RuntimeKind(str, Enum):
    docker = "docker"


@dataclass
class VolumeConfig:
    host: str = MISSING
    container: str = MISSING
    read_only: bool = True  # writable host mounts must be asked for


@dataclass
class ScratchConfig:
    """A writable directory the run creates for the arm (autotune or compile caches): host side
    RUN/scratch/<share or arm>/<name>, mounted read-write at `container`. Arms that name the same
    `share` see one directory; by default every arm gets a fresh one."""

    container: str = MISSING
    share: str | None = None


@dataclass
class BuildConfig:
    """How to build the image when it is not present locally (no registry is assumed)."""

    context: str | None = None  # directory, relative to the project root; None: never build
    dockerfile: str = "Dockerfile"
    args: dict[str, str] = field(default_factory=dict)


@dataclass
class ArmConfig:
    """One serving configuration = one container."""

    description: str = ""
    image: str = MISSING  # tag or id; pinned to its digest at run time
    build: BuildConfig = field(default_factory=BuildConfig)
    command: list[str] = field(default_factory=list)  # before engine_args; [] = image entrypoint only
    # Engine flags as a map: {moe-backend: triton, enforce-eager: true} -> --moe-backend triton
    # --enforce-eager; false -> --no-<flag>; null -> omitted.
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    secret_env: list[str] = field(default_factory=list)  # names copied from the host env, never stored
    served_model_name: str = "reference"
    port: int = 8000  # the server's port inside the container
    health_path: str = "/health"
    startup_timeout_s: float = 300.0
    gpus: str | None = None  # null: none; "all"; or device ids "0,1"
    shm_size: str | None = None  # e.g. "8g"
    ipc_mode: str | None = None  # e.g. "host"; refused unless allow_host_ipc
    allow_host_ipc: bool = False
    network_host: bool = False  # host networking; off unless the config says so
    volumes: list[VolumeConfig] = field(default_factory=list)
    scratch: dict[str, ScratchConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        if self.ipc_mode == "host" and not self.allow_host_ipc:
            problems.append("ipc_mode=host shares the host's IPC namespace; set allow_host_ipc: true "
                            "to accept that, or use shm_size instead")
        for volume in self.volumes:
            if volume.host.rstrip("/") == "" or volume.host.endswith("docker.sock"):
                problems.append(f"volume host path '{volume.host}' (the host root or the Docker socket) "
                                "is never mounted")
        if self.gpus is not None and self.gpus != "all" and not all(
                part.strip().isdigit() for part in self.gpus.split(",")):
            problems.append(f"gpus='{self.gpus}' is not valid: use null, 'all' or device ids like '0,1'")
        if problems:
            raise ConfigError(problems)


@dataclass
class PromptConfig:
    text: str | None = None
    file: str | None = None  # relative to conf/prompts/, or absolute
    repeat_to_chars: int | None = None  # repeat the text to this length (budget studies)


@dataclass
class PromptSetConfig:
    name: str = MISSING
    prompts: dict[str, PromptConfig] = field(default_factory=dict)


@dataclass
class RequestConfig:
    """The body of every /v1/completions request (model and prompt are filled in)."""

    max_tokens: int = 16
    temperature: float = 0.0
    logprobs: int | None = 20  # top-k per generated position
    prompt_logprobs: int | None = None
    echo: bool = False
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the body as is


@dataclass
class PhaseConfig:
    kind: PhaseKind = PhaseKind.sequential
    repeats: int = 6  # sequential: requests per prompt; concurrent: requests per batch
    batches: int = 1  # concurrent only: how many batches per prompt

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.batches < 1:
            raise ConfigError(f"phase repeats and batches must be >= 1 (got {self.repeats}, {self.batches})")


@dataclass
class ProtocolConfig:
    name: str = MISSING
    request: RequestConfig = field(default_factory=RequestConfig)
    phases: dict[str, PhaseConfig] = field(default_factory=dict)  # run in this order
    request_timeout_s: float = 300.0
    significant_digits: int = 12  # precision of top-logprob signatures


@dataclass
class StudyConfig:
    name: str = MISSING
    description: str = ""
    baseline: str | None = None  # the arm others are compared against; default: the first arm


@dataclass
class RuntimeConfig:
    kind: RuntimeKind = RuntimeKind.docker
    docker_host: str | None = None  # None: DOCKER_HOST or the local socket
    stop_timeout_s: float = 10.0


@dataclass
class Config:
    study: StudyConfig = field(default_factory=StudyConfig)
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    prompts: PromptSetConfig = field(default_factory=PromptSetConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    def __post_init__(self) -> None:
        problems = []
        if not self.arms:
            problems.append("the study has no arms: add `- /arm@arms.NAME: TEMPLATE` to its defaults")
        if self.study.baseline is not None and self.study.baseline not in self.arms:
            problems.append(f"study.baseline '{self.study.baseline}' is not an arm. "
                            f"Available: {', '.join(self.arms)}")
        if not self.prompts.prompts:
            problems.append(f"prompt set '{self.prompts.name}' has no prompts")
        if not self.protocol.phases:
            problems.append(f"protocol '{self.protocol.name}' has no phases")
        if problems:
            raise ConfigError(problems)

    @property
    def baseline_arm(self) -> str:
        return self.study.baseline or next(iter(self.arms))


def register_configs() -> None:
    """The top-level schema types every node below it (arms, protocol, prompts, runtime, study)."""
    ConfigStore.instance().store(name="config_schema", node=Config)
