"""The declared check: the resolved arm configs, leaf by leaf, before anything starts.

Baseline vs each arm: anything beyond the arm's declared `study.variables` is an extra difference
(ConfigError, exit 2, unless `study.allow_confounded`, then the report's headline says CONFOUNDED); and
arms that share a scratch dir (`scratch.*.share`) but differ in a `study.cache_leaves` leaf. Pure.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from orchestrator.config.arms import ResolvedArm, resolve_arms
from orchestrator.config.catalog import line
from orchestrator.errors import ConfigError, counted
from orchestrator.guard import caches, coupled, held, overlap
from orchestrator.guard.leaves import arm_leaves, describe_all, describe_extra, differences, matches, positive, show
from orchestrator.guard.results import (
    ABSENT,
    CONFOUNDED,
    SINGLE,
    UNDECLARED,
    DeclaredCheck,
    DeclaredPair,
    SharedCache,
)

if TYPE_CHECKING:
    from orchestrator.config.schema import Config


def validate_variables(config: Config) -> list[str]:
    """Every problem with study.variables: unknown arms, leaves that exist in neither arm, undeclared arms."""
    study, baseline = config.study, config.baseline_arm
    problems = []
    base = arm_leaves(config.arms[baseline], [])
    strays = [arm for arm in study.variables if arm not in config.arms]  # e.g. removed with ~arms.NAME
    for arm, declared in study.variables.items():
        if arm not in config.arms:
            continue
        valid = set(base) | set(arm_leaves(config.arms[arm], []))
        for leaf in declared:
            if not any(matches(v, positive(leaf, config.arms[arm].engine)) for v in valid):
                hint = difflib.get_close_matches(leaf, sorted(valid), n=1, cutoff=0.5)
                problems.append(f"study.variables.{arm}: '{leaf}' is not a leaf of arm '{arm}' or of the baseline "
                                f"'{baseline}'.{f' Did you mean {hint[0]!r}?' if hint else ''} Leaves are dotted "
                                f"paths inside the arm config, e.g. {', '.join(sorted(valid)[:6])}, ...")
    if study.variables:
        for arm in config.arms:
            if arm != baseline and arm not in study.variables:
                close = difflib.get_close_matches(arm, strays, n=1, cutoff=0.5)
                typo = f" (study.variables names '{close[0]}', which is not in the study: a typo?)" if close else ""
                problems.append(f"arm '{arm}' declares no variable: add study.variables.{arm}: [LEAF, ...] "
                                f"([] when it should equal the baseline){typo}")
    return problems


def both_spellings(config: Config) -> list[str]:
    """Arms that set a switch both ways, engine_args.X and its negated name (engine_args.no-X): the engine gets
    both flags, and the declared check would see two leaves where the arm means one."""
    found = []
    for arm, arm_config in config.arms.items():
        engine_args = arm_config.engine_args
        for name, value in engine_args.items():
            leaf = f"engine_args.{name}"
            switch = positive(leaf, arm_config.engine)
            other = engine_args.get(switch.partition(".")[2])
            if switch == leaf or other is None or value is None:
                continue
            verdict = "they contradict" if other == value else "they say the same twice"
            found.append(f"arms.{arm} sets both {switch}={show(other)} and {leaf}={show(value)}: {verdict}; "
                         "keep one")
    return found


def declared_check(config: Config, arms: Mapping[str, ResolvedArm] | None = None) -> DeclaredCheck:
    """Baseline vs each arm, leaf by leaf, as declared and as resolved (`arms`: config/arms.py `resolve_arms`,
    made here for a caller that has only the config). Raises ConfigError for a malformed `study.variables`."""
    problems = validate_variables(config)
    if problems:
        raise ConfigError(problems)
    arms = resolve_arms(config) if arms is None else arms
    study, baseline = config.study, config.baseline_arm
    base = arm_leaves(config.arms[baseline], study.ignore_leaves)
    pairs = []
    for arm, arm_config in config.arms.items():
        if arm == baseline:
            continue
        diff = differences(base, arm_leaves(arm_config, study.ignore_leaves))
        declared = study.variables.get(arm)
        if declared is None:
            pairs.append(DeclaredPair(arm, None, diff, extra=sorted(diff), verdict=UNDECLARED))
            continue
        named = {d: positive(d, arm_config.engine) for d in declared}  # engine_args.no-X is the switch X
        extra = [leaf for leaf in diff if not any(matches(leaf, d) for d in named.values())]
        every_diff = differences(arm_leaves(config.arms[baseline], []), arm_leaves(arm_config, []))
        unused = [d for d in declared if not any(matches(leaf, named[d]) for leaf in every_diff)]
        as_run = differences(arm_leaves(arms[baseline].arm, []), arm_leaves(arms[arm].arm, []))
        equal = [d for d in declared if d not in unused and not any(matches(leaf, named[d]) for leaf in as_run)]
        several = [coupled.sentence(arm, baseline, leaf, moves, arm_config.engine)
                   for leaf, moves in coupled.moved(diff, arm_config.engine).items()]
        pairs.append(DeclaredPair(arm, list(declared), diff, extra=extra, unused=unused, stand_in_equal=equal,
                                  coupled=several, verdict=CONFOUNDED if extra else SINGLE))
    return DeclaredCheck(checked=bool(study.variables), baseline=baseline, allow_confounded=study.allow_confounded,
                         pairs=pairs, not_in_study=[arm for arm in study.variables if arm not in config.arms],
                         shared_caches=shared_caches(config),
                         stand_in=next((resolved.stand_in_image for resolved in arms.values()), None))


def refusal(declared: DeclaredCheck, typos: Collection[str] = ()) -> list[str]:
    """One problem per confounded pair, naming every differing leaf, and per declared variable that does not
    differ; [] when the run may go on. `typos`: arms that set a name their engine does not know (the knob
    check's line says it), whose pairs' confounds are left out: the typo is the confound."""
    found = [line("declared-equal", f"study.variables.{p.arm}", leaf, f"a leaf where arm '{p.arm}' differs from "
                  f"baseline '{declared.baseline}' (declared but not different)", f"give arms.{p.arm}.{leaf} "
                  "another value, or remove it from the declaration")
             for p in declared.pairs for leaf in p.unused]
    if declared.allow_confounded:
        return found
    return found + [f"arm '{p.arm}' differs from baseline '{declared.baseline}' in "
                    f"{counted(len(p.differing), 'leaf', 'leaves')}, "
                    f"{len(p.extra)} beyond its declared variable(s) {', '.join(p.declared or []) or '(none)'}: "
                    f"{describe_all(p)}. Declare them in study.variables.{p.arm}, make the arms agree, or set "
                    "study.allow_confounded: true"
                    for p in declared.pairs if p.verdict == CONFOUNDED and not {p.arm, declared.baseline} & set(typos)]


def problems(config: Config, arms: Mapping[str, ResolvedArm] | None = None) -> list[str]:
    """Every guard problem found before anything starts: a switch set both ways, malformed variables, a
    confounded or mis-declared A/B, a hidden shared cache, arms that may not start overlapped."""
    if found := both_spellings(config) + validate_variables(config) + held.problems(config):
        return found
    return refusal(declared_check(config, arms)) + caches.problems(config) + overlap.problems(config)


def caused_by_typos(config: Config, arms: Mapping[str, ResolvedArm], typos: Collection[str]) -> list[str]:
    """The problems of `problems` that the typos cause (an arm's or the baseline's unknown name differs as a
    leaf): the typo's own line stands alone; a confound beyond it is said once it is fixed."""
    if not typos or validate_variables(config) + held.problems(config) + both_spellings(config):
        return []
    declared = declared_check(config, arms)
    kept = refusal(declared, typos)
    return [problem for problem in refusal(declared) if problem not in kept]


def enforce_declared(config: Config) -> DeclaredCheck:
    """The declared check, raising ConfigError (exit 2) for any of `problems`."""
    if found := problems(config):
        raise ConfigError(found)
    return declared_check(config)


def shared_caches(config: Config) -> list[SharedCache]:
    """Every scratch dir that several arms share; flagged when they differ in a cache leaf."""
    groups: dict[tuple[str, str], list[str]] = {}
    for arm, arm_config in config.arms.items():
        for name, scratch in arm_config.scratch.items():
            if scratch.share is not None:
                groups.setdefault((scratch.share, name), []).append(arm)
    found = []
    for (share, name), arms in groups.items():
        if len(arms) < 2:
            continue
        leaves = {arm: arm_leaves(config.arms[arm], []) for arm in arms}
        keys = sorted({k for lv in leaves.values() for k in lv
                       if any(matches(k, p) for p in config.study.cache_leaves)})
        differing = {k: {arm: leaves[arm].get(k, ABSENT) for arm in arms} for k in keys
                     if len({json.dumps(leaves[arm].get(k, ABSENT), sort_keys=True) for arm in arms}) > 1}
        found.append(SharedCache(f"scratch/{share}/{name}", arms, differing, flagged=bool(differing)))
    return found


def warnings(declared: DeclaredCheck) -> list[str]:
    """What the run goes on with but says up front: an allowed confound, a flagged shared cache."""
    found = []
    if declared.allow_confounded:
        found += [f"CONFOUNDED (allowed): arm '{p.arm}' also differs in {describe_extra(p)}"
                  for p in declared.pairs if p.verdict == CONFOUNDED]
    found += declared.stand_in_sentences() + declared.coupled_sentences()
    for cache in declared.shared_caches:
        if cache.flagged:
            found.append(f"shared cache {cache.dir} across arms that differ in "
                         f"{', '.join(cache.differing)}: {', '.join(cache.arms)}")
    return found
