"""The observed check: the arms' fingerprints (image id, versions, GPU, env inside the container,
startup-log facts), field by field. A field that differs and that no declared leaf explains, directly or
through `study.implications`, makes the pair confounded; one that could not be read makes it unknown.
Results merge into RUN/guard.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.guard.leaves import ABSENT, CONFOUNDED, SINGLE, UNDECLARED, UNKNOWN, differences, matches

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.record.paths import RunPaths


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


def write(paths: RunPaths, **parts: Any) -> dict[str, Any]:
    """Merge `parts` into RUN/guard.json (atomically) and return the whole document."""
    from orchestrator.record.paths import atomic_write_text

    current = json.loads(paths.guard_json.read_text()) if paths.guard_json.is_file() else {}
    current.update(parts)
    atomic_write_text(paths.guard_json, json.dumps(current, indent=2, sort_keys=True, default=str) + "\n")
    return current


def after_run(config: Config, paths: RunPaths) -> dict[str, Any]:
    """The observed check over the arms table of a finished run, merged into guard.json."""
    from orchestrator.record.tables import read_table

    fingerprints: dict[str, Any] = {}
    try:
        rows = read_table(paths, "arms").to_pylist()
    except Exception:  # no arms table at all: every pair is unknown
        rows = []
    for row in rows:
        text = row.get("fingerprint_json")
        fingerprints[row["arm"]] = json.loads(text) if text else None
    return write(paths, observed=observed_check(config, fingerprints))
