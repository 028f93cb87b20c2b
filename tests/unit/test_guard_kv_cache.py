"""The hooked engine's `--static-cache` (docs/locate.md) is a declared variable whose startup fact (`KV cache:
static|dynamic`, log_facts.kv_cache) it explains: an A/B of it alone is single-variable, not CONFOUNDED."""

from __future__ import annotations

from orchestrator import config
from orchestrator.guard.observed import explains, observed_check
from orchestrator.guard.results import SINGLE


def test_static_cache_explains_the_kv_cache_fact_it_moves() -> None:
    typed = config.to_typed(config.compose(["runtime=process", "arm@arms.baseline=transformers_hooked_process",
                                            "arm@arms.wide_batch=transformers_hooked_process",
                                            "study.variables={wide_batch: [engine_args.static-cache]}",
                                            "+arms.wide_batch.engine_args.static-cache=true"]))
    assert explains(["engine_args.static-cache"], "log_facts.kv_cache", typed.study.implications)
    prints = {"baseline": {"log_facts": {"kv_cache": "dynamic"}}, "wide_batch": {"log_facts": {"kv_cache": "static"}}}
    pair = observed_check(typed, prints).pairs[0]
    assert pair.extra == [] and pair.verdict == SINGLE  # before: log_facts.kv_cache, CONFOUNDED
