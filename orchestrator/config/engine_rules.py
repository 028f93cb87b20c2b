"""The engines' own rules on a request, checked before anything starts, so that a study is refused with one
line instead of answered by dozens of HTTP 400s: `max_tokens` 0 only with `echo` (a protocol rule: nothing
would be generated to compare); `logprobs` and
`prompt_logprobs` at most the limit the arm's engine profile names (vLLM's `--max-logprobs`, default 20);
-1 (the whole vocabulary) only with a limit of -1; `digests` only to engines that record them, and not to an
arm that turns them off (`--no-digests`); the endpoint each arm asks, served by the engine that answers (a
stand-in's too)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.arms import ResolvedArm
from orchestrator.config.catalog import line
from orchestrator.config.schema import Config, Endpoint
from orchestrator.engines import ENGINES

# The engine that records digests, named in the fix: the first profile that can
DIGESTS_ENGINE = next(name for name, profile in ENGINES.items() if profile.capabilities.digests)


def problems(config: Config, arms: Mapping[str, ResolvedArm]) -> list[str]:
    """The protocol's requests against each resolved arm's engine (`arms`: config/arms.py `resolve_arms`)."""
    request = config.protocol.request
    found = []
    if request.max_tokens == 0 and not request.echo:
        found.append(line("engine-rule", "protocol.request.max_tokens", 0, "at least 1 without echo (0 generates "
                          "nothing to compare)", "set max_tokens >= 1, or protocol.request.echo: true "
                          "to score the prompt only"))
    for name, resolved in arms.items():
        engine = resolved.profile
        if problem := _endpoint_problem(name, resolved, resolved.arm.endpoint or config.protocol.endpoint):
            found.append(problem)
        if request.digests and not engine.capabilities.digests:
            template = f"{DIGESTS_ENGINE}_process" if resolved.on_host else DIGESTS_ENGINE  # the arm's runtime's
            found.append(f"protocol.request.digests is on, but arm '{name}' runs engine {engine.name}, which records "
                         f"no activation digests: make it an arm of `engine: {DIGESTS_ENGINE}` (template "
                         f"conf/arm/{template}.yaml), or set protocol.request.digests: false")
        elif request.digests and (off := _digests_off(resolved)):
            found.append(f"protocol.request.digests is on, but arm '{name}' runs with {off}, which records no "
                         f"digests: drop {off} (arms.{name}.engine_args.{engine.digests_flag}: true), or set "
                         "protocol.request.digests: false")
        limit, is_default = engine.max_logprobs(resolved.arm.engine_args)
        for key, asked in (("logprobs", request.logprobs), ("prompt_logprobs", request.prompt_logprobs)):
            if asked is None or limit is None or limit == -1:
                continue
            if asked == -1 or asked > limit:
                what = "the whole vocabulary (-1)" if asked == -1 else str(asked)
                default = " (the default)" if is_default else ""
                flag = engine.max_logprobs_flag
                found.append(f"protocol.request.{key}={asked} asks arm '{name}' for {what} logprobs, above its "
                             f"--{flag} {limit}{default}: lower it, or set "
                             f"arms.{name}.engine_args.{flag}: {asked}")
    return found


def _endpoint_problem(name: str, resolved: ResolvedArm, endpoint: Endpoint) -> str | None:
    """The endpoint an arm's requests go to, where the engine that answers serves none there: its own, or the
    reference engine under `stand_in=IMAGE` (no chat endpoint; its study would fail mid-run)."""
    served = resolved.profile.endpoints
    if (served.chat if endpoint is Endpoint.chat else served.completions) is not None:
        return None
    other = Endpoint.completions if endpoint is Endpoint.chat else Endpoint.chat
    engine = resolved.profile.name
    if resolved.stand_in_image is None:
        return line("cross-field", f"arms.{name}.endpoint", endpoint.value, f"an endpoint engine {engine} serves",
                    f"set arms.{name}.endpoint={other.value}")
    return line("cross-field", f"arms.{name}.endpoint", endpoint.value,
                f"an endpoint the stand-in serves (engine {engine} in {resolved.stand_in_image} serves no "
                f"{endpoint.value} endpoint)", f"run the study without stand_in, or set arms.{name}.endpoint="
                f"{other.value}")


def _digests_off(resolved: ResolvedArm) -> str | None:
    """The flag by which an arm whose engine records digests turns them off ('--no-digests'); None: it does not."""
    flag = resolved.profile.digests_flag
    if flag is None:
        return None
    off = f"--{resolved.profile.negated_prefix}{flag}"
    arm = resolved.arm
    return off if off in (*resolved.profile.flag_names(arm.engine_args), *arm.command) else None
