"""`study.noise_floor`: the baseline arm started twice, as two arms, so every A/B difference can be read next
to the difference between two starts of the same thing (A/A), measured in the same study. The copy is named
`<baseline>_aa`, runs right after the baseline, has its own scratch dirs (a `share` is dropped), and declares
no variable: the guard checks it changes nothing, in config and as observed."""

from __future__ import annotations

import copy

from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError

SUFFIX = "_aa"


def copy_name(baseline: str) -> str:
    return baseline + SUFFIX


def add_copy(typed: Config) -> None:
    """Expand the option in place: once, where the typed config is made, so every verb sees the same arms."""
    if not typed.study.noise_floor or not typed.arms:
        return
    baseline = typed.study.baseline if typed.study.baseline in typed.arms else next(iter(typed.arms))
    name = copy_name(baseline)
    if name in typed.arms:
        raise ConfigError(f"study.noise_floor: true adds the arm '{name}', and the study has an arm of that name: "
                          f"rename that arm, or set study.noise_floor: false and keep '{name}' as your A/A arm")
    twin = copy.deepcopy(typed.arms[baseline])
    twin.description = f"A/A: {baseline} started a second time (study.noise_floor)"
    for scratch in twin.scratch.values():
        scratch.share = None  # its own caches: a shared one would carry state from the first start
    arms = list(typed.arms.items())
    at = [n for n, _ in arms].index(baseline) + 1
    typed.arms = dict([*arms[:at], (name, twin), *arms[at:]])
    typed.study.variables[name] = []  # changes nothing
