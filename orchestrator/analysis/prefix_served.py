"""Whether measured requests were served a prefix from the engine's prefix cache, by the engine's own word (the
responses' `cached_prompt_tokens`, its usage.prompt_tokens_details.cached_tokens): the seed's protocol precondition
"prefix cache off" observed, not declared. From the record alone."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.analysis.compare import arm_engines
from orchestrator.record.recorded import Recorded

COLUMNS = ["arm", "role", "error", "cached_prompt_tokens"]


@dataclass(frozen=True)
class PrefixServed:
    """One arm's measured requests answered without an error, as its engine said of its prefix cache."""

    arm: str
    measured: int
    said: int  # of them, whose answer said how many prompt tokens the cache served (else: not observable)
    served: int  # of those, served at least one cached token
    most_cached_tokens: int  # the most prompt tokens one of them was served from the cache (0: none was)

    @property
    def off_held(self) -> bool | None:
        """The precondition "prefix cache off": held (no measured request was served from it), not (one was), or
        None: not observable (some answer did not say)."""
        return None if self.said < self.measured else self.served == 0


def prefix_served(recorded: Recorded) -> list[PrefixServed]:
    """Per arm with a measured answer, in record order; [] when no answer of the run says anything of a prefix
    cache (an engine that reports none, a record from before schema 9): nothing to state. An engine that says it
    only where some tokens were served (vLLM, under its profile's `cached_tokens_flag`) said 0 by saying nothing."""
    counts: dict[str, list[int]] = {}
    engines = arm_engines(recorded)
    for run in recorded.runs:
        rows = run.reads.ledger().select(COLUMNS).to_pylist()
        for row in rows:
            if row["role"] != "measured" or row["error"] is not None:
                continue
            name = run.label + str(row["arm"])
            tokens = row["cached_prompt_tokens"]
            if tokens is None and name in engines:
                profile, engine_args = engines[name]
                flag = profile.cached_tokens_flag
                tokens = 0 if flag is not None and profile.flag_value(engine_args, flag) is True else None
            arm = counts.setdefault(name, [0, 0, 0, 0])
            arm[0] += 1
            if tokens is not None:
                arm[1] += 1
                arm[2] += tokens > 0
                arm[3] = max(arm[3], tokens)
    out = [PrefixServed(arm, *values) for arm, values in counts.items()]
    return out if any(o.said for o in out) else []
