"""The engines' own rules on a request, checked before anything starts, so that a study is refused with one
line instead of answered by dozens of HTTP 400s. vLLM's (and the reference engine's, which mimics them):
`max_tokens` 0 only with `echo`; `logprobs` and `prompt_logprobs` at most `--max-logprobs` (default 20);
-1 (the whole vocabulary) only with `--max-logprobs -1`."""

from __future__ import annotations

from orchestrator.config.arms import effective_arm
from orchestrator.config.catalog import line
from orchestrator.config.schema import Config

DEFAULT_MAX_LOGPROBS = 20  # vLLM's --max-logprobs default (and the reference engine's)


def problems(config: Config) -> list[str]:
    request = config.protocol.request
    found = []
    if request.max_tokens == 0 and not request.echo:
        found.append(line("engine-rule", "protocol.request.max_tokens", 0, "at least 1 without echo (0 generates "
                          "nothing, and vLLM refuses it)", "set max_tokens >= 1, or protocol.request.echo: true "
                          "to score the prompt only"))
    for name, original in config.arms.items():
        arm = effective_arm(original, config.stand_in)
        limit = arm.engine_args.get("max-logprobs", DEFAULT_MAX_LOGPROBS)
        limit = DEFAULT_MAX_LOGPROBS if limit is None else int(limit)
        for key, asked in (("logprobs", request.logprobs), ("prompt_logprobs", request.prompt_logprobs)):
            if asked is None or limit == -1:
                continue
            if asked == -1 or asked > limit:
                what = "the whole vocabulary (-1)" if asked == -1 else str(asked)
                default = " (the default)" if "max-logprobs" not in arm.engine_args else ""
                found.append(f"protocol.request.{key}={asked} asks arm '{name}' for {what} logprobs, above its "
                             f"--max-logprobs {limit}{default}: lower it, or set "
                             f"arms.{name}.engine_args.max-logprobs: {asked}")
    return found
