"""The observed check: the arms' fingerprints (image id, versions, GPU, env inside the container,
startup-log facts), field by field. A field that differs and that no declared leaf explains, directly or
through `study.implications`, makes the pair confounded; one that could not be read makes it unknown.
A held fact (`study.held_facts`, guard/held.py) is judged apart: it must be equal, whatever is declared.
Results merge into RUN/guard.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.guard import held, versions
from orchestrator.guard.leaves import differences, matches, positive, positive_keys
from orchestrator.guard.results import (
    ABSENT,
    CONFOUNDED,
    SINGLE,
    UNDECLARED,
    UNKNOWN,
    GuardResult,
    ObservedCheck,
    ObservedPair,
)
from orchestrator.record.paths import read_json

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.recorded import RecordedRun


def observed_fields(fingerprint: Mapping[str, Any], image_id: str | None = None) -> dict[str, Any]:
    """A fingerprint (as study.py stores it) as flat fields: image.id, packages.torch, gpu.driver,
    env.X (OMP_NUM_THREADS, MKL_NUM_THREADS among them), cpus_usable, log_facts.autotune_key, server.version, ...
    Where an arm ran (its host, GPU UUIDs, cpuset) is no field: arms placed apart are compared by what they saw
    there (GPU model, driver, CUDA, CPU model, usable cores, image id), so a placement that changes one of those
    is an undeclared second variable."""
    probe = fingerprint.get("probe") or {}
    fields: dict[str, Any] = {"image.id": image_id or fingerprint.get("image_id")}
    for key in ("python", "cuda", "os", "cpu", "cpus_usable"):
        if key in probe:
            fields[key] = probe[key]
    for group in ("packages", "gpu", "env"):
        for key, value in (probe.get(group) or {}).items():
            fields[f"{group}.{key}"] = value
    for key, value in (fingerprint.get("log_facts") or {}).items():
        fields[f"log_facts.{key}"] = value
    version = fingerprint.get("version")
    # /version first; the startup banner where the server has no such endpoint
    fields["server.version"] = (version.get("version") if isinstance(version, Mapping) else None) \
        or (fingerprint.get("log_facts") or {}).get("engine_version")
    models = fingerprint.get("models")
    served = (models.get("data") or [{}])[0] if isinstance(models, Mapping) else {}
    for key in ("root", "max_model_len"):  # the model folder it loaded, and the context it allows
        if isinstance(served, Mapping) and served.get(key) is not None:
            fields[f"server.{key}"] = served[key]
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


def observed_check(config: Config, fingerprints: Mapping[str, Mapping[str, Any] | None]) -> ObservedCheck:
    """Baseline vs each arm, fingerprint field by field. `fingerprints` maps arm -> its stored
    fingerprint (None when the arm failed before one was taken)."""
    study, baseline = config.study, config.baseline_arm
    pairs = []
    for arm in config.arms:
        if arm == baseline:
            continue
        declared = study.variables.get(arm)
        pair = ObservedPair(arm, None if declared is None else list(declared), {}, extra=[], verdict=UNKNOWN)
        pairs.append(pair)
        base_fp, arm_fp = fingerprints.get(baseline), fingerprints.get(arm)
        if base_fp is None or arm_fp is None:
            missing = [name for name, fp in ((baseline, base_fp), (arm, arm_fp)) if not fp]
            pair.unknown = [f"fingerprint of {', '.join(missing)} (the arm failed before it was taken)"]
            continue
        for name, fp in ((baseline, base_fp), (arm, arm_fp)):
            if (fp.get("probe") or {}).get("error"):
                pair.unknown.append(f"probe in {name}: {fp['probe']['error']}")
        base_fields, arm_fields = (
            {k: v for k, v in observed_fields(fp).items() if not any(matches(k, p) for p in study.ignore_fields)}
            for fp in (base_fp, arm_fp))
        pair.differing = differences(base_fields, arm_fields)
        # a negated switch (engine_args.no-X) as the switch it sets, in the declaration and in the table alike
        engine = config.arms[arm].engine
        leaves = [positive(leaf, engine) for leaf in declared or []]
        implications = positive_keys(study.implications, engine)
        for field, (left, right) in pair.differing.items():
            if held.is_held(field, study.held_facts) or explains(leaves, field, implications):
                continue
            if ABSENT in (left, right) or None in (left, right):
                pair.unknown.append(f"{field} (read in one arm only)")
            else:
                pair.extra.append(field)
        held_differing, not_observed = held.check(
            study.held_facts, {name: fp.get("log_facts") or {} for name, fp in ((baseline, base_fp), (arm, arm_fp))})
        pair.differing.update(held_differing)
        pair.extra += list(held_differing)
        pair.unknown += not_observed
        if declared is None:
            pair.verdict = UNDECLARED
        else:
            pair.verdict = CONFOUNDED if pair.extra else UNKNOWN if pair.unknown else SINGLE
    return ObservedCheck(baseline, pairs)


def write(paths: RunPaths, guard: GuardResult) -> None:
    """RUN/guard.json, atomically: written after each check, so a run stopped half-way keeps the rest."""
    from orchestrator.record.paths import atomic_write_text

    atomic_write_text(paths.guard_json, json.dumps(guard.to_json(), indent=2, sort_keys=True, default=str) + "\n")


def read(paths: RunPaths) -> GuardResult | None:
    return GuardResult.from_json(read_json(paths.guard_json)) if paths.guard_json.is_file() else None


def after_run(config: Config, run: RecordedRun, guard: GuardResult) -> GuardResult:
    """The observed check over the arms of a finished run as read once (record/recorded.py; a later start,
    study.starts, is not probed; an arm without a row: unknown), and the known issues of the versions they
    recorded (guard/versions.py), added to `guard` and guard.json."""
    fingerprints = {arm.arm: arm.fingerprint for arm in run.arms}
    guard.observed = observed_check(config, fingerprints)
    guard.known_issues = versions.run_notes(config, fingerprints)
    write(run.paths, guard)
    return guard
