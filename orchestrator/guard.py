"""Single-variable guard: is an A/B really one variable? Checked before the run and after it.

    declared   the resolved arm configs, leaf by leaf: baseline vs each arm, anything beyond the arm's
               declared `study.variables` is an extra difference (ConfigError, exit 2, unless
               `study.allow_confounded`, then the report's headline says CONFOUNDED)
    caches     arms that share a scratch dir (`scratch.*.share`) but differ in a `study.cache_leaves` leaf
    knobs      flags and env vars an arm sets that the engine in its image does not know (exit 2)
    observed   the arms' fingerprints (image id, versions, GPU, env inside the container, startup-log
               facts), field by field; a field that differs and that no declared leaf explains, directly
               or through `study.implications`, makes the pair confounded; one that could not be read
               makes it unknown

Everything but `check_knobs` (which runs containers through an injected runtime) is pure. The results
go to RUN/guard.json; `markdown_section` renders them for the report. See docs/guard.md.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.plan import effective_arm
from orchestrator.runtime.base import LABEL_NS

if TYPE_CHECKING:
    from orchestrator.paths import RunPaths
    from orchestrator.runtime.base import Runtime
    from orchestrator.schema import ArmConfig, Config

ABSENT = "<absent>"
SINGLE, CONFOUNDED, UNKNOWN, UNDECLARED = "single-variable", "confounded", "unknown", "not declared"


# leaves ---------------------------------------------------------------------------------------------
def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'engine_args': {'seed': 0}, 'env': {}} -> {'engine_args.seed': 0}. Lists are one leaf."""
    if is_dataclass(node) and not isinstance(node, type):
        node = asdict(node)
    if isinstance(node, Mapping):
        leaves: dict[str, Any] = {}
        for key, value in node.items():
            leaves.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return leaves
    if hasattr(node, "value") and not isinstance(node, str | int | float | bool):  # enums
        node = node.value
    return {prefix: node}


def matches(path: str, pattern: str) -> bool:
    """A pattern names a leaf or everything under a prefix; '*' names everything."""
    return pattern == "*" or path == pattern or path.startswith(pattern + ".")


def arm_leaves(arm: ArmConfig | Mapping[str, Any], ignore: list[str]) -> dict[str, Any]:
    return {k: v for k, v in flatten(arm).items() if not any(matches(k, p) for p in ignore)}


def differences(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Leaf -> [baseline value, arm value] for every leaf that differs (ABSENT where one lacks it)."""
    return {key: [base.get(key, ABSENT), other.get(key, ABSENT)]
            for key in sorted(set(base) | set(other)) if base.get(key, ABSENT) != other.get(key, ABSENT)}


# declared check -------------------------------------------------------------------------------------
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
            if not any(matches(v, leaf) for v in valid):
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


def declared_check(config: Config) -> dict[str, Any]:
    """Baseline vs each arm, leaf by leaf. Raises ConfigError for a malformed `study.variables`."""
    problems = validate_variables(config)
    if problems:
        raise ConfigError(problems)
    study, baseline = config.study, config.baseline_arm
    base = arm_leaves(config.arms[baseline], study.ignore_leaves)
    pairs = []
    for arm, arm_config in config.arms.items():
        if arm == baseline:
            continue
        diff = differences(base, arm_leaves(arm_config, study.ignore_leaves))
        declared = study.variables.get(arm)
        if declared is None:
            pairs.append({"arm": arm, "declared": None, "differing": diff, "extra": sorted(diff),
                          "unused": [], "verdict": UNDECLARED})
            continue
        extra = [leaf for leaf in diff if not any(matches(leaf, d) for d in declared)]
        unused = [d for d in declared if not any(matches(leaf, d) for leaf in diff)]
        pairs.append({"arm": arm, "declared": list(declared), "differing": diff, "extra": extra,
                      "unused": unused, "verdict": CONFOUNDED if extra else SINGLE})
    return {"checked": bool(study.variables), "baseline": baseline, "allow_confounded": study.allow_confounded,
            "pairs": pairs, "confounded": any(p["verdict"] == CONFOUNDED for p in pairs),
            "not_in_study": [arm for arm in study.variables if arm not in config.arms],  # ignored
            "shared_caches": shared_caches(config)}


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def describe_extra(pair: Mapping[str, Any]) -> str:
    """'engine_args.moe-backend (<absent> -> flashinfer_cutlass), ...'"""
    return ", ".join(f"{leaf} ({_show(pair['differing'][leaf][0])} -> {_show(pair['differing'][leaf][1])})"
                     for leaf in pair["extra"])


def refusal(declared: Mapping[str, Any]) -> list[str]:
    """One problem per confounded pair, naming every differing leaf; [] when the run may go on."""
    if declared["allow_confounded"]:
        return []
    return [f"arm '{p['arm']}' differs from baseline '{declared['baseline']}' in {len(p['differing'])} leaves, "
            f"{len(p['extra'])} beyond its declared variable(s) {', '.join(p['declared']) or '(none)'}: "
            f"{describe_all(p)}. Declare them in study.variables.{p['arm']}, make the arms agree, or set "
            "study.allow_confounded: true"
            for p in declared["pairs"] if p["verdict"] == CONFOUNDED]


def describe_all(pair: Mapping[str, Any]) -> str:
    """Every differing leaf, each marked declared or NOT declared."""
    return ", ".join(f"{leaf} ({_show(old)} -> {_show(new)}) "
                     f"[{'NOT declared' if leaf in pair['extra'] else 'declared'}]"
                     for leaf, (old, new) in pair["differing"].items())


def enforce_declared(config: Config) -> dict[str, Any]:
    """The declared check, raising ConfigError (exit 2) for a confounded, not allowed study."""
    result = declared_check(config)
    problems = refusal(result)
    if problems:
        raise ConfigError(problems)
    return result


# shared caches --------------------------------------------------------------------------------------
def shared_caches(config: Config) -> list[dict[str, Any]]:
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
        found.append({"dir": f"scratch/{share}/{name}", "arms": arms, "differing": differing,
                      "flagged": bool(differing)})
    return found


# knobs ----------------------------------------------------------------------------------------------
def arm_flags(engine_args: Mapping[str, Any]) -> list[str]:
    """The flag names engine_argv emits: {fused-finalize: false} -> ['--no-fused-finalize']."""
    flags = []
    for name, value in engine_args.items():
        if value is None:
            continue
        flag = name if name.startswith("-") else f"--{name}"
        flags.append(f"--no-{flag.lstrip('-')}" if value is False else flag)
    return flags


def unknown_knobs(arm: str, arm_config: ArmConfig, known: Mapping[str, Any]) -> list[str]:
    """Problems for the flags and env vars (within knobs.env_prefixes) the engine's listing lacks."""
    flags, env = set(known.get("flags") or ()), set(known.get("env") or ())
    problems = []
    for flag in arm_flags(arm_config.engine_args):
        if flag not in flags:
            problems.append(f"arm '{arm}': flag {flag} is not known to the engine in {arm_config.image} "
                            f"(it would be ignored).{_closest(flag, flags)}")
    for name in [*arm_config.env, *arm_config.secret_env]:
        if any(name.startswith(p) for p in arm_config.knobs.env_prefixes) and name not in env:
            problems.append(f"arm '{arm}': env {name} is not known to the engine in {arm_config.image} "
                            f"(it would be ignored).{_closest(name, env)}")
    return problems


def _closest(name: str, choices: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else f" The engine knows {len(choices)} such names."


def parse_knobs(output: str) -> dict[str, Any] | None:
    for line in reversed(output.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and ("flags" in value or "env" in value):
            return value
    return None


def check_knobs(config: Config, runtime: Runtime, run_id: str) -> dict[str, Any]:
    """Ask each arm's image which knobs its engine knows (a throwaway container, no network) and
    compare with what the arm sets: arm -> {checked, unknown: [problem, ...], ...}."""
    results: dict[str, Any] = {}
    listings: dict[tuple[str, tuple[str, ...], tuple[str, ...] | None], dict[str, Any] | None] = {}
    for arm, original in config.arms.items():
        arm_config = effective_arm(original, config.stand_in)
        knobs = arm_config.knobs
        if config.stand_in:
            results[arm] = {"checked": False, "reason": f"stand-in {config.stand_in} runs instead of the arm's image",
                            "unknown": []}
            continue
        if knobs.command is None:
            results[arm] = {"checked": False, "reason": "arm.knobs.command is null", "unknown": []}
            continue
        try:  # a missing image or a broken listing is the arm's own failure later, not the guard's
            image = runtime.resolve_image(arm_config.image, arm_config.build)
            key = (image.id, tuple(knobs.command), tuple(knobs.entrypoint) if knobs.entrypoint is not None else None)
            if key not in listings:
                labels = {f"{LABEL_NS}.run": run_id, f"{LABEL_NS}.arm": arm, f"{LABEL_NS}.purpose": "knobs"}
                out = runtime.run_oneshot(image.id, list(knobs.command), labels, knobs.entrypoint, knobs.timeout_s)
        except OrchestratorError as exc:
            results[arm] = {"checked": False, "reason": f"the knob listing could not run: {exc}", "unknown": []}
            continue
        if key not in listings:
            listings[key] = parse_knobs(out.output) if out.exit_code == 0 else None
            if listings[key] is None:
                results[arm] = {"checked": False, "unknown": [],
                                "reason": f"the knob listing failed (exit {out.exit_code}): {out.output[-300:]}"}
                continue
        known = listings[key]
        if known is None:
            results[arm] = {"checked": False, "reason": "the knob listing failed", "unknown": []}
            continue
        found = unknown_knobs(arm, arm_config, known)
        results[arm] = {"checked": True, "unknown": found, "flags_known": len(known.get("flags") or ()),
                        "env_known": len(known.get("env") or ())}
    return results


def knob_refusal(config: Config, knobs: Mapping[str, Any]) -> list[str]:
    """The problems that stop the run (exit 2), unless study.allow_unknown_knobs."""
    problems = [problem for result in knobs.values() for problem in result.get("unknown", [])]
    if not problems or config.study.allow_unknown_knobs:
        return []
    return [*problems, "fix the names, or set study.allow_unknown_knobs: true to run anyway"]


def warnings(declared: Mapping[str, Any]) -> list[str]:
    """What the run goes on with but says up front: an allowed confound, a flagged shared cache."""
    found = []
    if declared.get("allow_confounded"):
        found += [f"CONFOUNDED (allowed): arm '{p['arm']}' also differs in {describe_extra(p)}"
                  for p in declared["pairs"] if p["verdict"] == CONFOUNDED]
    for cache in declared.get("shared_caches", []):
        if cache["flagged"]:
            found.append(f"shared cache {cache['dir']} across arms that differ in "
                         f"{', '.join(cache['differing'])}: {', '.join(cache['arms'])}")
    return found


# observed check -------------------------------------------------------------------------------------
def observed_fields(fingerprint: Mapping[str, Any], image_id: str | None = None) -> dict[str, Any]:
    """A fingerprint (as study.py stores it) as flat fields: image.id, packages.torch, gpu.driver,
    env.X, log_facts.autotune_key, server.version, ..."""
    probe = fingerprint.get("probe") or {}
    fields: dict[str, Any] = {"image.id": image_id or fingerprint.get("image_id")}
    for key in ("python", "cuda", "os", "cpu"):
        if key in probe:
            fields[key] = probe[key]
    for group in ("packages", "gpu", "env"):
        for key, value in (probe.get(group) or {}).items():
            fields[f"{group}.{key}"] = value
    for key, value in (fingerprint.get("log_facts") or {}).items():
        fields[f"log_facts.{key}"] = value
    version = fingerprint.get("version")
    if isinstance(version, Mapping):
        fields["server.version"] = version.get("version")
    return fields


def explains(declared: list[str], field: str, implications: Mapping[str, list[str]]) -> bool:
    """Does a declared leaf account for a difference in this fingerprint field? A leaf covers the field
    of its own name (env.X -> env.X) and the fields `implications` lists for it or for a prefix of it."""
    for leaf in declared:
        if matches(field, leaf):
            return True
        for key, fields in implications.items():
            if (matches(leaf, key) or matches(key, leaf)) and any(matches(field, f) for f in fields):
                return True
    return False


def observed_check(config: Config, fingerprints: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """Baseline vs each arm, fingerprint field by field. `fingerprints` maps arm -> its stored
    fingerprint (None when the arm failed before one was taken)."""
    study, baseline = config.study, config.baseline_arm
    pairs = []
    for arm in config.arms:
        if arm == baseline:
            continue
        declared = study.variables.get(arm)
        pair: dict[str, Any] = {"arm": arm, "declared": declared, "differing": {}, "extra": [], "unknown": []}
        base_fp, arm_fp = fingerprints.get(baseline), fingerprints.get(arm)
        missing = [name for name, fp in ((baseline, base_fp), (arm, arm_fp)) if not fp]
        if missing:
            pair["unknown"] = [f"fingerprint of {', '.join(missing)} (the arm failed before it was taken)"]
            pair["verdict"] = UNKNOWN
            pairs.append(pair)
            continue
        assert base_fp is not None and arm_fp is not None
        for name, fp in ((baseline, base_fp), (arm, arm_fp)):
            if (fp.get("probe") or {}).get("error"):
                pair["unknown"].append(f"probe in {name}: {fp['probe']['error']}")
        keep = [p for p in study.ignore_fields]
        base_fields = {k: v for k, v in observed_fields(base_fp).items() if not any(matches(k, p) for p in keep)}
        arm_fields = {k: v for k, v in observed_fields(arm_fp).items() if not any(matches(k, p) for p in keep)}
        diff = {k: v for k, v in differences(base_fields, arm_fields).items()}
        pair["differing"] = diff
        covered = list(declared or [])
        for field, (left, right) in diff.items():
            if explains(covered, field, study.implications):
                continue
            if ABSENT in (left, right) or None in (left, right):
                pair["unknown"].append(f"{field} (read in one arm only)")
            else:
                pair["extra"].append(field)
        if declared is None:
            pair["verdict"] = UNDECLARED
        else:
            pair["verdict"] = CONFOUNDED if pair["extra"] else UNKNOWN if pair["unknown"] else SINGLE
        pairs.append(pair)
    return {"baseline": baseline, "pairs": pairs}


# guard.json and the report ----------------------------------------------------------------------------
def write(paths: RunPaths, **parts: Any) -> dict[str, Any]:
    """Merge `parts` into RUN/guard.json (atomically) and return the whole document."""
    from orchestrator.paths import atomic_write_text

    current = json.loads(paths.guard_json.read_text()) if paths.guard_json.is_file() else {}
    current.update(parts)
    atomic_write_text(paths.guard_json, json.dumps(current, indent=2, sort_keys=True, default=str) + "\n")
    return current


def after_run(config: Config, paths: RunPaths) -> dict[str, Any]:
    """The observed check over the arms table of a finished run, merged into guard.json."""
    from orchestrator.store import read_table

    fingerprints: dict[str, Any] = {}
    try:
        rows = read_table(paths, "arms").to_pylist()
    except Exception:  # no arms table at all: every pair is unknown
        rows = []
    for row in rows:
        text = row.get("fingerprint_json")
        fingerprints[row["arm"]] = json.loads(text) if text else None
    return write(paths, observed=observed_check(config, fingerprints))


def headline(guard: Mapping[str, Any]) -> str:
    declared = guard.get("declared") or {}
    observed = guard.get("observed") or {}
    base = declared.get("baseline") or observed.get("baseline")
    confounded = []
    for p in declared.get("pairs", []):
        if p["verdict"] == CONFOUNDED:
            confounded.append(f"{p['arm']} vs {base} in config: {describe_extra(p)}")
    for p in observed.get("pairs", []):
        if p["verdict"] == CONFOUNDED:
            confounded.append(f"{p['arm']} vs {base} observed: {describe_extra(p)}")
    if confounded:
        return "**CONFOUNDED**: " + "; ".join(confounded)
    if not declared.get("checked"):
        return ("Single-variable check: not declared (set study.variables to check that each arm changes "
                "one thing)")
    unknown = [f"{p['arm']}: {', '.join(p['unknown'])}" for p in observed.get("pairs", []) if p["verdict"] == UNKNOWN]
    if unknown:
        return "Single-variable in config; observed check incomplete (unknown): " + "; ".join(unknown)
    arms = ", ".join(f"{p['arm']} changes {', '.join(p['declared']) or 'nothing'}" for p in declared["pairs"])
    where = "in config and observed" if observed else "in config (not yet observed)"
    return f"Single-variable {where}: against {base}, {arms}"


def markdown_section(guard: Mapping[str, Any]) -> list[str]:
    """Report lines for guard.json: the headline first, then one row per pair, shared caches, knobs."""
    lines = [headline(guard), ""]
    declared = guard.get("declared") or {}
    observed = {p["arm"]: p for p in (guard.get("observed") or {}).get("pairs", [])}
    if declared.get("pairs"):
        lines += ["| arm | declared variable | config check | observed check |", "| --- | --- | --- | --- |"]
        for p in declared["pairs"]:
            config_cell = p["verdict"] + (f": {describe_extra(p)}" if p["extra"] else "")
            obs = observed.get(p["arm"])
            if obs is None:
                obs_cell = "not run"
            else:
                obs_cell = obs["verdict"] + (f": {describe_extra(obs)}" if obs["extra"] else "")
                if obs["unknown"]:
                    obs_cell += f" (unknown: {', '.join(obs['unknown'])})"
            lines.append(f"| {p['arm']} | {', '.join(p['declared'] or []) or '-'} | {config_cell} | {obs_cell} |")
        lines.append("")
    for cache in declared.get("shared_caches", []):
        if cache["flagged"]:
            what = ", ".join(f"{leaf} ({', '.join(f'{a}={_show(v)}' for a, v in values.items())})"
                             for leaf, values in cache["differing"].items())
            lines.append(f"- **Shared cache flagged**: {cache['dir']} is shared by {', '.join(cache['arms'])}, "
                         f"which differ in {what}: one arm may load the other's entry.")
        else:
            lines.append(f"- Shared cache {cache['dir']} ({', '.join(cache['arms'])}): the arms agree on every "
                         "cache leaf.")
    for arm, knobs in (guard.get("knobs") or {}).items():
        if not knobs.get("checked"):
            lines.append(f"- Knobs of {arm}: not checked ({knobs.get('reason')})")
        elif knobs.get("unknown"):
            lines.append(f"- Knobs of {arm}: **unknown to the engine**: {'; '.join(knobs['unknown'])}")
    return lines
