"""What the orchestrator knows about one engine, in one place: its surface (the HTTP paths it serves, its
port and host flags, whether requests name the model, the dialect of its answers, what it lets be
observed), how `engine_args` become its flags (and which flag names mean the same), the neutral names of
the settings compared across engines and the flag each is, how it lists the knobs it knows, which of its
flags and env vars name a cache, what every request to it carries, the facts its log states, the metric
that counts its running requests, the flag that bounds how many logprobs it returns, and which module or
program of a command is the engine's own.

A profile is data plus the renderings every engine shares; an engine whose flags render otherwise
overrides `argv`. Nothing here starts, execs or reads a server.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from orchestrator.engines import stream
from orchestrator.engines.dialect import Dialect, ParsedCompletion
from orchestrator.engines.known_issues import KnownIssue
from orchestrator.engines.switches import Switch

# The settings the guard and the report compare across engines, by neutral name; each profile maps the ones
# it has to its own flag (`settings`), as a launcher maps neutral resources to each scheduler's options.
SETTINGS = (
    "max_batch",  # requests run at once
    "attention_backend",
    "continuous_batching",  # the switch, where the engine has one (vLLM always batches continuously)
    "prefix_cache",
    "cuda_graphs",  # CUDA graph capture of the forward: on, off, or unset (the engine's default)
    "compile",  # torch.compile of the forward (vLLM: its compilation mode): on, off, or unset
    "quantization",
    "tensor_parallel", "pipeline_parallel", "data_parallel",
)

# The log facts (profiles' `log_patterns`) that say which code path ran, where an engine's log says so: the
# report lists them per arm; the observed check compares them as every log fact (docs/guard.md)
PATH_FACTS = ("attention_backend", "cb_attention", "moe_backend", "moe_experts", "moe_prepare_finalize", "router",
              "router_topk", "indexer_topk", "topk_tiebreak", "fused_finalize", "reduction", "batch_invariant")


@dataclass(frozen=True)
class Endpoints:
    """The paths the engine serves; None: it serves none (nothing is asked there)."""

    health: str = "/health"  # HTTP 200 once ready (every engine has one: readiness is waited on)
    completions: str | None = "/v1/completions"
    chat: str | None = "/v1/chat/completions"
    models: str | None = "/v1/models"
    tokenize: str | None = None  # POST {prompt} -> {tokens: [ids]} (protocol.request.prompt_as=token_ids)
    version: str | None = None  # GET -> JSON naming its version
    metrics: str | None = None  # Prometheus text, read during concurrent batches
    # GET -> one flagged request's activation digests, "{request_id}" the answer's id (run/send/digests.py)
    digests: str | None = None
    # POST -> its prefix cache emptied (vLLM's /reset_prefix_cache): protocol.flush_prefix_cache sends it
    reset_prefix_cache: str | None = None

    def overridden(self, health: str | None, metrics: str | None) -> Endpoints:
        """With the arm's own `health_path` and `metrics_path` where it sets them (None: the profile's; a
        metrics path of "": none is read)."""
        return dataclasses.replace(self, health=health or self.health,
                                   metrics=self.metrics if metrics is None else metrics or None)


@dataclass(frozen=True)
class Capabilities:
    """What its answers and endpoints let be observed; the report says "not observable" for the rest."""

    logprobs: bool = False  # per-token logprobs and the top-k
    token_ids: bool = False  # the generated token ids (else cells are signed on their text)
    tokenize: bool = False  # the server's own token ids of a prompt
    metrics: bool = False  # running requests, sampled on its metrics endpoint
    trace: bool = False  # its own per-request trace in each answer: exact co-residency
    streaming: bool = False  # answers streamed as server-sent events (time to first token, inter-token latency)
    digests: bool = False  # per-module activation digests of requests flagged `"digest": true` (its digests path)
    # `prompt_logprobs: k` on its completions: each prompt position's token and top-k logprobs (a prefill's), so an
    # answer re-scored as a prompt tells a decode-path difference from a prefill-path one (protocol.rescore)
    prompt_logprobs: bool = False


@dataclass(frozen=True)
class EngineProfile:
    name: str  # what an arm's `engine:` says
    description: str
    endpoints: Endpoints = Endpoints()
    port_flag: str | None = "port"  # the flag that sets its port and host (None: it has none)
    host_flag: str | None = "host"
    names_model: bool = True  # requests carry `model`; False: the server answers with the one it loaded
    dialect: Dialect = field(default_factory=Dialect)
    capabilities: Capabilities = Capabilities()
    # Neutral setting (SETTINGS) -> the engine's flag; a setting the engine has no flag for is absent. A key of
    # a flag whose value is a JSON object is "FLAG.KEY" (vLLM's compilation-config.cudagraph_mode).
    settings: Mapping[str, str] = field(default_factory=dict)
    # A flag that moves several neutral settings at once -> those settings (vLLM's enforce-eager turns off both
    # CUDA graphs and torch.compile): an A/B that varies it varies all of them (guard/coupled.py says so).
    coupled: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A switch set false is its flag with this prefix ({batch-invariant: false} -> --no-batch-invariant, as
    # argparse's BooleanOptionalAction spells it); so `no-batch-invariant: true` names the same flag.
    negated_prefix: str = "no-"
    # Canonical flag name -> other spellings the engine accepts for it ({tensor-parallel-size: [tp]}).
    flag_aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The listing shipped in orchestrator/probes/ that prints the flags and env names the engine knows
    # (run inside the arm with its interpreter) when the arm's knobs name no command of their own.
    knob_probe: str | None = None
    # Env names with these prefixes are the engine's own: the knob check wants each in its listing.
    env_prefixes: tuple[str, ...] = ()
    # Flags and env vars that name a cache dir -> the kind of cache (guard/caches.py).
    cache_args: Mapping[str, str] = field(default_factory=dict)
    cache_env: Mapping[str, str] = field(default_factory=dict)
    # Fields every request to this engine carries, under the arm's own request_extra (null there drops one).
    request_extra: Mapping[str, Any] = field(default_factory=dict)
    # Fact name -> regex whose group 1 is the value, matched against the startup log (first match wins).
    log_patterns: Mapping[str, str] = field(default_factory=dict)
    running_metric: str | None = None  # Prometheus gauge of running requests on its metrics endpoint; None: none
    max_logprobs_flag: str | None = None  # the most logprobs a request may ask for
    default_max_logprobs: int | None = None  # when the arm does not set that flag
    # Flag (canonical name) -> the engine's default value, where known: the support matrix shows an arm's flags
    # against them, leaving out those set to the default (`non_default`)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # capabilities.digests: the flag whose false value turns the recording off (`--no-digests`), and how many
    # flagged requests' digests it keeps (the oldest go first): fetched after each phase (run/send/digests.py)
    digests_flag: str | None = None
    digest_capacity: int | None = None
    # Its flags that digest a part of the model only (a depth of module names, and a module with those inside it),
    # whose `locate` answer at a module not digested inside says how to look inside (docs/locate.md)
    digest_scope_flags: tuple[str, str] | None = None
    # The switch under which its usage says how many prompt tokens its prefix cache served, and says it only where
    # some were (vLLM's enable-prompt-tokens-details): with it on, an answer that says nothing had none. None: it
    # says so always (the reference engine), or never
    cached_tokens_flag: str | None = None
    # Env the arm must set for the engine to serve its endpoints.reset_prefix_cache (vLLM: only in dev mode)
    reset_prefix_cache_env: Mapping[str, str] = field(default_factory=dict)
    # Distributions whose versions are the engine's own (the matrix key's engine part; guard/fingerprint.py).
    packages: tuple[str, ...] = ()
    # Known defects by version of its stack (engines/known_issues.py), judged against each arm's recorded
    # versions by `check` and the report (guard/versions.py)
    known_issues: tuple[KnownIssue, ...] = ()
    # Its determinism switches (engines/switches.py), in the order `triage` tries them
    switches: tuple[Switch, ...] = ()
    # What the engine's own command runs: its top-level modules (`python -m vllm.entrypoints...`) and programs
    # (`vllm serve`). Only an arm whose command runs one of them must be able to import the engine.
    modules: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()

    def argv(self, engine_args: Mapping[str, Any]) -> list[str]:
        """{seed: 0, enforce-eager: true, enable-prefix-caching: false} ->
        ['--seed', '0', '--enforce-eager', '--no-enable-prefix-caching']; null omits a flag; a map is one JSON
        value ({compilation-config: {mode: 0}} -> ['--compilation-config', '{"mode": 0}'])."""
        argv: list[str] = []
        for name, value in engine_args.items():
            if value is None:
                continue
            flag = _flag(name)
            if value is True:
                argv.append(flag)
            elif value is False:
                argv.append(f"--{self.negated_prefix}{flag.lstrip('-')}")
            elif isinstance(value, list | tuple):
                argv += [flag, *map(str, value)]
            elif isinstance(value, Mapping):
                argv += [flag, json.dumps(value)]
            else:
                argv += [flag, str(value)]
        return argv

    def runs_itself(self, command: Sequence[str]) -> bool:
        """Whether an arm's command runs this engine's own module or program: none or flags only (the image's
        entrypoint), `python3 -u -m vllm.entrypoints.openai.api_server`, `/venv/bin/vllm serve`; not a script
        (`python3 my_server.py`: a fork, a mock, a recording server may import anything, or nothing)."""
        if not command or command[0].startswith("-"):
            return True
        if PurePosixPath(command[0]).name in self.programs:
            return True
        words = iter(command[1:])
        for word in words:  # the interpreter's options, up to -m
            if word == "-m":
                return next(words, "").split(".")[0] in self.modules
            if word in ("-W", "-X"):  # Python's options that take a value
                next(words, None)
            elif not word.startswith("-"):
                break
        return False

    def switch_of(self, name: str) -> str | None:
        """The switch an `engine_args` name turns off when set true, as `argv` renders it: 'no-batch-invariant'
        -> 'batch-invariant' ({no-batch-invariant: true} and {batch-invariant: false} are both
        --no-batch-invariant); None: not a negated name."""
        prefix = self.negated_prefix
        return name[len(prefix):] if name.startswith(prefix) and len(name) > len(prefix) else None

    def flag_names(self, engine_args: Mapping[str, Any]) -> list[str]:
        """The flag names `argv` emits: {fused-finalize: false} -> ['--no-fused-finalize']."""
        return [f"--{self.negated_prefix}{_flag(name).lstrip('-')}" if value is False else _flag(name)
                for name, value in engine_args.items() if value is not None]

    def flag_value(self, engine_args: Mapping[str, Any], canonical: str) -> Any:
        """The value set under the flag's name or any alias, or false where its negated name is set true
        (`switch_of`); None: not set, the engine's default."""
        for name in (canonical, *self.flag_aliases.get(canonical, ())):
            for spelled in (name, name.replace("-", "_")):
                if engine_args.get(spelled) is not None:
                    return engine_args[spelled]
                if engine_args.get(f"{self.negated_prefix}{spelled}") is True:
                    return False
        return None

    def default_of(self, name: str) -> tuple[str, Any] | None:
        """(the canonical flag, its default) for an `engine_args` name, an alias or a negated name ('no-X': X's
        default negated); None where the profile does not know its default."""
        negated = self.switch_of(name)
        canonical = next((flag for flag, aliases in self.flag_aliases.items() if name in aliases), negated or name)
        defaults = {**self.defaults, **({self.max_logprobs_flag: self.default_max_logprobs}
                                        if self.max_logprobs_flag and self.default_max_logprobs is not None else {})}
        if canonical not in defaults:
            return None
        value = defaults[canonical]
        return canonical, (not value if negated and isinstance(value, bool) else value)

    def non_default(self, engine_args: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """The arm's flags that differ from the engine's defaults: name -> (value, default; None: not known);
        a flag set to its known default is left out."""
        found: dict[str, tuple[Any, Any]] = {}
        for name, value in engine_args.items():
            known = self.default_of(name)
            if known is None:
                found[name] = (value, None)
            elif not _same(value, known[1]):
                found[name] = (value, known[1])
        return found

    def setting(self, engine_args: Mapping[str, Any], neutral: str) -> Any:
        """A neutral setting's value as the arm's flags set it (a "FLAG.KEY" setting: that key of the flag's map or
        JSON text); None: not set, or no such flag here."""
        flag, _, key = self.settings.get(neutral, "").partition(".")
        value = self.flag_value(engine_args, flag) if flag else None
        if not key or value is None:
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        return value.get(key) if isinstance(value, Mapping) else None

    def capacity(self, engine_args: Mapping[str, Any]) -> int | None:
        """Requests the engine runs at once, as the arm's flags set it; None: unknown (its default)."""
        value = self.setting(engine_args, "max_batch")
        return int(value) if value is not None else None

    def unobserved(self) -> str:
        """Why a batch's co-residency went unseen on this engine, for the report's "not observable" lines:
        what it lacks, or, where it has it, what gave nothing."""
        can = self.capabilities
        return ", ".join(("no running-requests count from its metrics" if can.metrics else "no /metrics",
                          "no trace in its answers" if can.trace else "no trace"))

    def parse(self, body: bytes) -> ParsedCompletion:
        """A completion body as this engine answers it (its dialect); a streamed one (server-sent events) as
        the unstreamed body it amounts to, with what was wrong with the stream first among the problems."""
        if not stream.is_sse(body):
            return self.dialect.parse(body)
        whole = stream.assemble(body)
        out = self.dialect.parse(whole.body)
        out.problems[:0] = whole.problems
        return out

    def model_field(self, served_model_name: str | None) -> str | None:
        """The `model` its requests carry: the arm's served name, or none for a server that takes none."""
        return served_model_name if self.names_model else None

    def model(self, engine_args: Mapping[str, Any], command: Sequence[str] = ()) -> str | None:
        """The model it serves as the arm states it: its `model` (or `model_tag`) engine arg, else the word after
        `serve` in a command that runs the engine's own program (`vllm serve MODEL`); None: not stated."""
        value = self.flag_value(engine_args, "model") or self.flag_value(engine_args, "model-tag")
        words = list(command[1:])
        if value is None and command and PurePosixPath(command[0]).name in self.programs and "serve" in words:
            value = next(iter(words[words.index("serve") + 1:]), None)
        return None if value is None or str(value).startswith("-") else str(value)

    def max_logprobs(self, engine_args: Mapping[str, Any]) -> tuple[int | None, bool]:
        """(the limit, whether it is the engine's default); (None, True): the engine has no such limit."""
        if self.max_logprobs_flag is None:
            return None, True
        value = self.flag_value(engine_args, self.max_logprobs_flag)
        return (self.default_max_logprobs, True) if value is None else (int(value), False)

    def extra(self, arm_extra: Mapping[str, Any]) -> dict[str, Any]:
        """The fields a request to this arm carries: the profile's, then the arm's (null drops one)."""
        merged = {**self.request_extra, **arm_extra}
        return {k: v for k, v in merged.items() if v is not None}

    def log_facts(self, lines: Iterable[str]) -> dict[str, str]:
        """The first match of each log pattern, in log order; a fact no line states is absent."""
        compiled = _compiled(tuple(self.log_patterns.items()))
        facts: dict[str, str] = {}
        for line in lines:
            for name, pattern in compiled:
                if name not in facts and (match := pattern.search(line)):
                    facts[name] = match.group(1)
        return facts

    def running_requests(self, metrics_text: str) -> int | None:
        """Sum of the running-requests gauge over its label sets, from Prometheus text; None if absent."""
        metric = self.running_metric
        if metric is None:
            return None
        values = [float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
                  if line.startswith(metric) and line[len(metric):][:1] in ("{", " ")]
        return int(sum(values)) if values else None


def _same(value: Any, default: Any) -> bool:
    """A flag's value against its default, numbers by value (16 and 16.0) and text as written ("16")."""
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    try:
        return float(value) == float(default)
    except (TypeError, ValueError):
        return str(value) == str(default)


def _flag(name: str) -> str:
    return name if name.startswith("-") else f"--{name}"


_CACHE: dict[tuple[tuple[str, str], ...], list[tuple[str, re.Pattern[str]]]] = {}


def _compiled(patterns: tuple[tuple[str, str], ...]) -> list[tuple[str, re.Pattern[str]]]:
    if patterns not in _CACHE:
        _CACHE[patterns] = [(name, re.compile(pattern)) for name, pattern in patterns]
    return _CACHE[patterns]
