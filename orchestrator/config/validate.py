"""Every check a typed config gets before anything starts, in one place: ranges, names that must exist,
cross-field rules, files readable as text, dangerous options (the engines' own rules read the resolved arms:
config/engine_rules.py, after this). All problems of a
config are reported at once, one line each (field, value, what is valid, the fix); exit 2.

`load` is what every verb uses to get a config: compose (project conf + user dirs), type, validate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.config import security, series
from orchestrator.config.background import phase_backgrounds
from orchestrator.config.catalog import line
from orchestrator.config.compose import compose, resolve_prompts, to_typed
from orchestrator.config.schema import Arrivals, Config, Endpoint, LoadConfig, PhaseKind, PromptAs
from orchestrator.config.synthetic import SYNTHETIC
from orchestrator.engines import ENGINES
from orchestrator.errors import ConfigError
from orchestrator.runtime.spec import Mount, map_mounts
from orchestrator.runtime.traits import BUILT_IN, traits_of

VERDICTS = ("identical", "agree", "differ")  # analysis/gate.py EXPECTED_VERDICTS

# (what is valid, the test): the range rules a numeric leaf may name below.
POSITIVE = ("> 0", lambda v: v > 0)
NON_NEGATIVE = (">= 0", lambda v: v >= 0)
AT_LEAST_ONE = (">= 1", lambda v: v >= 1)
RATE = ("in [0, 1]", lambda v: 0 <= v <= 1)
OPEN_RATE = ("in (0, 1), e.g. 0.01 for <= 1 % at 95 %", lambda v: 0 < v < 1)
LOGPROBS = ("null, -1 (the whole vocabulary) or >= 0", lambda v: v is None or v >= -1)
PORT = ("in 1..65535", lambda v: 1 <= v <= 65535)
TEMPERATURE = ("in [0, 2]", lambda v: 0 <= v <= 2)  # the OpenAI API's range, and both engines'
DIGITS = ("in 1..17", lambda v: 1 <= v <= 17)


def load(overrides: list[str], dirs: list[Path] | None = None, allow: list[str] | None = None) -> Config:
    """Compose, type and validate: the config of every verb, or one ConfigError listing every problem."""
    typed = to_typed(compose(overrides, dirs))
    if problems := validate(typed, allow):
        raise ConfigError(problems)
    return typed


def validate(config: Config, allow: list[str] | None = None,
             how_to_allow: str = security.OWN_CONFIG_ALLOW) -> list[str]:
    """Every problem of a typed config, one line each; [] when it may run. `allow` replaces the config's
    own runtime.allow (someone else's config: `reproduce --allow`)."""
    problems = [line("range", field, value, valid) for field, value, valid, ok in _ranges(config) if not ok]
    problems += _names(config)
    problems += _cross_field(config)
    kind = runtime_kind_problems(config)  # the rules of the runtime's traits need a runtime
    problems += kind or _process_arms(config)
    problems += _load_points(config)
    if not problems:  # the rules below read fields the range checks vouch for
        problems += security.problems(config, list(config.runtime.allow) if allow is None else allow, how_to_allow)
        try:
            resolve_prompts(config.prompts, config.config_dirs)
        except ConfigError as exc:
            problems += exc.problems
        try:
            phase_backgrounds(config)
        except ConfigError as exc:
            problems += exc.problems
    return problems


def _ranges(config: Config) -> Iterator[tuple[str, Any, str, bool]]:
    def check(field: str, value: Any, rule: tuple[str, Callable[[Any], bool]]) -> tuple[str, Any, str, bool]:
        valid, test = rule
        finite = not (isinstance(value, float) and math.isnan(value))
        return field, value, valid, finite and test(value)

    for name, arm in config.arms.items():
        yield check(f"arms.{name}.startup_timeout_s", arm.startup_timeout_s, POSITIVE)
        yield check(f"arms.{name}.port", arm.port, PORT)
        yield check(f"arms.{name}.knobs.timeout_s", arm.knobs.timeout_s, POSITIVE)
        for leaf in ("gpu_count", "cpus"):
            if getattr(arm, leaf) is not None:
                yield check(f"arms.{name}.{leaf}", getattr(arm, leaf), AT_LEAST_ONE)
    request = config.protocol.request
    yield check("protocol.request.max_tokens", request.max_tokens, NON_NEGATIVE)
    yield check("protocol.request.temperature", request.temperature, TEMPERATURE)
    yield check("protocol.request.logprobs", request.logprobs, LOGPROBS)
    yield check("protocol.request.prompt_logprobs", request.prompt_logprobs, LOGPROBS)
    if config.protocol.request_timeout_s is not None:
        yield check("protocol.request_timeout_s", config.protocol.request_timeout_s, POSITIVE)
    yield check("protocol.significant_digits", config.protocol.significant_digits, DIGITS)
    yield check("protocol.warmup_requests", config.protocol.warmup_requests, NON_NEGATIVE)
    if config.protocol.target_bound is not None:
        yield check("protocol.target_bound", config.protocol.target_bound, OPEN_RATE)
    if config.protocol.stop_after_divergences is not None:
        yield check("protocol.stop_after_divergences", config.protocol.stop_after_divergences, AT_LEAST_ONE)
    for name, phase in config.protocol.phases.items():
        yield check(f"protocol.phases.{name}.repeats", phase.repeats, AT_LEAST_ONE)
        yield check(f"protocol.phases.{name}.batches", phase.batches, AT_LEAST_ONE)
    yield check("study.explorer_branches", config.study.explorer_branches, AT_LEAST_ONE)
    yield check("study.starts", config.study.starts, AT_LEAST_ONE)
    yield check("runtime.stop_timeout_s", config.runtime.stop_timeout_s, NON_NEGATIVE)
    if config.gate.max_divergence_rate is not None:
        yield check("gate.max_divergence_rate", config.gate.max_divergence_rate, RATE)
    for prompt_id, prompt in config.prompts.prompts.items():
        yield check(f"prompts.prompts.{prompt_id}.expect.min_share", prompt.expect.min_share, RATE)
        if prompt.repeat_to_chars is not None:
            yield check(f"prompts.prompts.{prompt_id}.repeat_to_chars", prompt.repeat_to_chars, AT_LEAST_ONE)
        if prompt.length_tokens is not None:
            yield check(f"prompts.prompts.{prompt_id}.length_tokens", prompt.length_tokens, AT_LEAST_ONE)


def runtime_kind_problems(config: Config) -> list[str]:
    """The runtime.kind that names no runtime (a built-in one, or module:Class of one outside runtime/)."""
    try:
        traits_of(config.runtime.kind)
    except ValueError as exc:
        return [line("unknown-name", "runtime.kind", config.runtime.kind, list(BUILT_IN),
                     f"use one of them, or module:Class of a runtime outside runtime/ (docs/runtimes.md): {exc}")]
    return []


def _names(config: Config) -> list[str]:
    """Every name that must exist: the baseline, the arms that variables and gates name, verdicts."""
    arms = list(config.arms)
    found = []
    if not arms:
        found.append(line("empty", "arms", {}, "at least one arm",
                          "add `- /arm@arms.NAME: TEMPLATE` to the study's defaults"))
    found += [line("unknown-name", f"arms.{name}.engine", arm.engine, sorted(ENGINES))
              for name, arm in config.arms.items() if arm.engine not in ENGINES]
    for leaf, name in (("baseline", config.study.baseline), ("control", config.study.control)):
        if name is not None and name not in config.arms:
            found.append(line("unknown-name", f"study.{leaf}", name, arms))
    if len(arms) > 1:  # one arm (e.g. `~arms.B` on the command line) has no A/B to declare
        found += [line("unknown-name", f"study.variables.{arm}", arm, arms, f"remove it (~study.variables.{arm})")
                  for arm in config.study.variables if arm not in config.arms]
    for group, expected in (("expect_pairs", config.gate.expect_pairs),
                            ("expect_schedules", config.gate.expect_schedules)):
        for arm, verdict in expected.items():
            if arm not in config.arms:
                found.append(line("unknown-name", f"gate.{group}.{arm}", arm, arms))
            if verdict not in VERDICTS:
                found.append(line("unknown-name", f"gate.{group}.{arm}", verdict, list(VERDICTS)))
    if not config.prompts.prompts:
        found.append(line("empty", "prompts.prompts", {}, "at least one prompt",
                          f"add prompts to prompt set '{config.prompts.name}'"))
    if not config.protocol.phases:
        found.append(line("empty", "protocol.phases", {}, "at least one phase",
                          f"add a sequential or concurrent phase to protocol '{config.protocol.name}'"))
    return found


def _cross_field(config: Config) -> list[str]:
    found = []
    for name, arm in config.arms.items():
        if arm.gpus is not None and arm.gpus != "all" and not all(
                part.strip().isdigit() for part in arm.gpus.split(",")):
            found.append(line("range", f"arms.{name}.gpus", arm.gpus, "null, 'all' or device ids like '0,1'"))
        if arm.gpus is not None and arm.gpu_count is not None:
            found.append(line("cross-field", f"arms.{name}.gpu_count", arm.gpu_count,
                              "null when the arm names its GPUs", f"keep gpus or gpu_count (arms.{name}.gpus=null)"))
        if arm.memory is not None and not re.fullmatch(r"\s*\d+\s*[bkmgtBKMGT]?[bB]?\s*", arm.memory):
            found.append(line("range", f"arms.{name}.memory", arm.memory, "a size like 512m or 32g"))
    parallel = str(config.study.parallel_arms)
    if parallel != "auto" and not (parallel.isdigit() and int(parallel) >= 1):
        found.append(line("range", "study.parallel_arms", config.study.parallel_arms, "auto or an integer >= 1"))
    elif parallel != "1" and config.runtime.overlap_arm_starts:
        found.append(line("cross-field", "runtime.overlap_arm_starts", True,
                          "false when arms run side by side (study.parallel_arms)",
                          "keep one: runtime.overlap_arm_starts=false or study.parallel_arms=1"))
    for name, phase in config.protocol.phases.items():
        if phase.kind is PhaseKind.sequential and phase.batches != 1:
            found.append(line("cross-field", f"protocol.phases.{name}.batches", phase.batches,
                              "1 for a sequential phase (batches are concurrent)",
                              f"set protocol.phases.{name}.repeats instead, or kind: concurrent"))
    if config.protocol.request.prompt_as is PromptAs.token_ids:
        chat = [f"protocol '{config.protocol.name}'"] if config.protocol.endpoint is Endpoint.chat else []
        chat += [f"arm {name}" for name, arm in config.arms.items() if arm.endpoint is Endpoint.chat]
        if chat:
            found.append(line("cross-field", "protocol.request.prompt_as", "token_ids",
                              "text when a chat endpoint is used (chat messages carry text)",
                              "set protocol.request.prompt_as=text, or the completions endpoint for "
                              + ", ".join(chat)))
        untokenized = [f"arm {name} (engine {arm.engine})" for name, arm in config.arms.items()
                       if arm.engine in ENGINES and ENGINES[arm.engine].endpoints.tokenize is None]
        if untokenized:
            found.append(line("cross-field", "protocol.request.prompt_as", "token_ids",
                              "text for an engine that serves no tokenize endpoint",
                              "set protocol.request.prompt_as=text, or another engine for " + ", ".join(untokenized)))
    if config.protocol.rescore and (not config.protocol.request.logprobs or config.protocol.endpoint is Endpoint.chat):
        found.append(line("cross-field", "protocol.rescore", True, "the completions endpoint, and the answers' own "
                          "logprobs to compare with the prefill's", "set protocol.request.logprobs=1 (or more) and "
                          "protocol.endpoint=completions, or protocol.rescore=false"))
    for prompt_id, prompt in config.prompts.prompts.items():
        if (prompt.text is None) == (prompt.file is None):
            found.append(line("cross-field", f"prompts.prompts.{prompt_id}", "text and file" if prompt.text
                              else "neither text nor file", "exactly one of text or file", "keep one of them"))
    return found


def _process_arms(config: Config) -> list[str]:
    """What a local process cannot be given (runtime=process, docs/runtimes.md): an argv without a program
    (there is no image entrypoint to put before it), and a scratch dir it would never see (no filesystem
    namespace: a scratch dir reaches the engine only through its path in the argv or env, rewritten)."""
    if traits_of(config.runtime.kind).isolates_filesystem:
        return []
    found = []
    for name, arm in config.arms.items():
        if not arm.command or arm.command[0].startswith("-"):
            found.append(line("cross-field", f"arms.{name}.command", list(arm.command),
                              "a full argv with runtime=process, its program first (there is no image entrypoint)",
                              f"set arms.{name}.command (e.g. [python3, -m, refengine]), or for the reference "
                              f"engine use arm@arms.{name}=reference_process"))
        for leaf, value in (("privileged", arm.privileged), ("cap_add", list(arm.cap_add)), ("memory", arm.memory)):
            if value:  # the runtime could not honour it (runtime/process.py refuses such a spec at start)
                found.append(line("cross-field", f"arms.{name}.{leaf}", value, f"unset with runtime=process (a local "
                                  f"process cannot be given a {leaf} setting)", f"remove it (~arms.{name}.{leaf}), "
                                  "or run the arm in a container (runtime=docker)"))
        engine = ENGINES.get(arm.engine)  # an unknown one is its own problem (_names)
        named = [*arm.command, *(engine.argv(arm.engine_args) if engine else []), *arm.env.values()]
        for scratch_name, scratch in arm.scratch.items():
            if map_mounts(named, [Mount("", scratch.container, False)]) == named:  # the runtime's rule: unused
                found.append(line("cross-field", f"arms.{name}.scratch.{scratch_name}.container", scratch.container,
                                  "a path the arm's command, engine_args or env names with runtime=process (a "
                                  "process has no filesystem of its own: that path is rewritten to the scratch dir)",
                                  f"name it where the engine reads it (e.g. arms.{name}.env.VLLM_CACHE_ROOT="
                                  f"{scratch.container}), or remove it (~arms.{name}.scratch.{scratch_name})"))
    return found


# The highest rate a load point may ask for: what run/load/generator.py was measured to pace on a 2-core machine
# against a local server, its achieved rate within 1 % of the schedule (docs/load.md, "Pacing"). Above it the schedule
# would be a wish, not the traffic sent.
MAX_RATE_PER_S = 1000.0


def _load_points(config: Config) -> list[str]:
    """A load phase's settings (docs/load.md): one line each, the fix named."""
    found = []
    phases = config.protocol.phases
    for name, phase in phases.items():
        if phase.kind is PhaseKind.load:
            found += _load_point(f"protocol.phases.{name}.load", phase.load)
        if series.MARK in name and any(series.is_series(p) for p in phases.values()):
            found.append(line("cross-field", "protocol.phases", name, f"phase names without {series.MARK!r} in a "
                              f"protocol with a series (PHASE{series.MARK}K names its points)", "rename the phase"))
    return found


def _load_point(at: str, load: LoadConfig) -> list[str]:
    found = []
    rate, concurrency = load.rate_per_s, load.concurrency
    if rate is not None and not (rate > 0):
        found.append(line("range", f"{at}.rate_per_s", rate, "> 0 (requests per second)",
                          f"set a positive rate, or null with {at}.concurrency for a closed loop"))
    elif rate is not None and rate > MAX_RATE_PER_S:
        found.append(line("range", f"{at}.rate_per_s", rate, f"at most {MAX_RATE_PER_S:g}, the most this machine's "
                          "load generator was measured to pace (docs/load.md)",
                          f"lower it, or use a closed loop ({at}.rate_per_s=null, {at}.concurrency=N)"))
    if concurrency is not None and concurrency < 1:
        found.append(line("range", f"{at}.concurrency", concurrency, ">= 1", "set it >= 1, or null under a rate"))
    found += [line("cross-field", *problem) for problem in series.problems(at, load)]
    if rate is None and concurrency is None and not load.series.points:  # a series sets its points' rates
        found.append(line("cross-field", f"{at}.rate_per_s", None, "a rate, a concurrency, or both",
                          f"set {at}.rate_per_s (e.g. 8) or {at}.concurrency (a closed loop, e.g. 8)"))
    if (load.requests is None) == (load.duration_s is None):
        given = "both requests and duration_s" if load.requests is not None else "neither requests nor duration_s"
        found.append(line("cross-field", f"{at}.requests", load.requests, f"one stop, a count or a duration ({given} "
                          "set)", f"keep one: {at}.requests=N or {at}.duration_s=S (the other null)"))
    if load.requests is not None and load.requests < 1:
        found.append(line("range", f"{at}.requests", load.requests, ">= 1"))
    if load.duration_s is not None and not (load.duration_s > 0):
        found.append(line("range", f"{at}.duration_s", load.duration_s, "> 0 (seconds)"))
    if load.arrivals is Arrivals.gamma and not (load.gamma_shape > 0):
        found.append(line("range", f"{at}.gamma_shape", load.gamma_shape, "> 0 with arrivals=gamma (<1 burstier, "
                          ">1 smoother than Poisson)"))
    for leaf, value, valid in (("windows", load.windows, AT_LEAST_ONE), ("probe_every", load.probe_every, AT_LEAST_ONE),
                               ("grace_s", load.grace_s, NON_NEGATIVE)):
        if not (value == value and valid[1](value)):  # NaN fails too
            found.append(line("range", f"{at}.{leaf}", value, valid[0]))
    tokens = list(load.background_max_tokens)
    if not tokens or any(t < 1 for t in tokens):
        found.append(line("range", f"{at}.background_max_tokens", tokens, "a non-empty list of max_tokens >= 1",
                          f"e.g. {at}.background_max_tokens=[16,32,64]"))
    found += _synthetic(load, at)
    warm = load.warmup
    for leaf, count in (("requests", warm.requests), ("extend_windows", warm.extend_windows)):
        if count < 0:
            found.append(line("range", f"{at}.warmup.{leaf}", count, ">= 0"))
    if warm.duration_s is not None and (warm.requests or not warm.duration_s > 0):
        found.append(line("cross-field", f"{at}.warmup.duration_s", warm.duration_s, "> 0, and only with "
                          "warmup.requests=0 (one stop)", f"keep one: {at}.warmup.requests or {at}.warmup.duration_s"))
    if warm.rate_per_s is not None and not (0 < warm.rate_per_s <= MAX_RATE_PER_S):
        found.append(line("range", f"{at}.warmup.rate_per_s", warm.rate_per_s, f"in (0, {MAX_RATE_PER_S:g}]"))
    if warm.concurrency is not None and warm.concurrency < 1:
        found.append(line("range", f"{at}.warmup.concurrency", warm.concurrency, ">= 1"))
    return found


def _synthetic(load: LoadConfig, at: str) -> list[str]:
    """The synthetic background's settings (config/synthetic.py)."""
    syn, found = load.synthetic, []
    for leaf, value, valid in (("input_words_mean", syn.input_words_mean, (">= 1 (words)", lambda v: v >= 1)),
                               ("output_tokens_mean", syn.output_tokens_mean, (">= 1 (tokens)", lambda v: v >= 1)),
                               ("input_words_stddev", syn.input_words_stddev, NON_NEGATIVE),
                               ("output_tokens_stddev", syn.output_tokens_stddev, NON_NEGATIVE),
                               ("prefix_share", syn.prefix_share, ("in [0, 1]", lambda v: 0 <= v <= 1))):
        if not (value == value and valid[1](value)):  # NaN fails too
            found.append(line("range", f"{at}.synthetic.{leaf}", value, valid[0]))
    if syn.prompts is not None and syn.prompts < 1:
        found.append(line("range", f"{at}.synthetic.prompts", syn.prompts, ">= 1, or null (100, or the study's "
                          "highest concurrency)"))
    if syn.prefix_share and load.background != SYNTHETIC:
        found.append(line("cross-field", f"{at}.synthetic.prefix_share", syn.prefix_share, "0 unless "
                          f"background={SYNTHETIC} (only the synthetic set reuses prefixes)",
                          f"set {at}.background={SYNTHETIC}, or {at}.synthetic.prefix_share=0"))
    return found
