"""Flags that move several variables at once. vLLM's --enforce-eager turns off both CUDA graphs and torch.compile:
an A/B that varies it is one leaf in config, yet two variables in what runs. The engine's profile lists such flags
(`coupled`); the guard says it for each arm that differs from the baseline in one, in `check` and the report."""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.engines import DEFAULT_ENGINE, ENGINES


def moved(leaves: Iterable[str], engine: str | None) -> dict[str, list[str]]:
    """Each differing leaf that is a coupled flag of the arm's engine -> the neutral settings it moves:
    {'engine_args.enforce-eager': ['cuda_graphs', 'compile']}. Leaves as `leaves.positive` spells them."""
    profile = ENGINES.get(engine or DEFAULT_ENGINE)
    if profile is None:
        return {}
    found = {}
    for leaf in leaves:
        group, _, name = leaf.partition(".")
        if group == "engine_args" and name in profile.coupled:
            found[leaf] = list(profile.coupled[name])
    return found


def sentence(arm: str, baseline: str, leaf: str, settings: list[str], engine: str | None) -> str:
    """'arm 'eager' differs from baseline 'graphs' in engine_args.enforce-eager, one flag that moves 2 variables
    (cuda_graphs and compile): its A/B is not one variable; vary one alone with ...'"""
    profile = ENGINES.get(engine or DEFAULT_ENGINE)
    alone = [f"engine_args.{profile.settings[s]} ({s})" for s in settings if profile and s in profile.settings]
    hint = f"; vary one alone with {' or '.join(alone)}" if alone else ""
    return (f"arm '{arm}' differs from baseline '{baseline}' in {leaf}, one flag that moves {len(settings)} "
            f"variables ({' and '.join(settings)}): its A/B is not one variable{hint}")
