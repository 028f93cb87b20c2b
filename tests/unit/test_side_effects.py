"""The side-effect audit (issue 49, "what else it changed") on canned records: a switch that also widens the batch
window names the window and nothing it declared; a clean switch names nothing; memory, held facts, an image's
'*' implication, an undeclared flag with its neutral setting; bad arms and a run dir without its config refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.errors import ConfigError, RecordError
from orchestrator.guard.observed import write as write_guard
from orchestrator.guard.results import GuardResult, KnobCheck
from orchestrator.guard.side_effects import CONFIG, HELD, KNOBS, MEMORY, OBSERVED, side_effects
from orchestrator.record.ledger import Reads
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import ArmStart, RecordedRun, RunMeta
from tests.conftest import ROOT

DEFAULTS = yaml.safe_load((ROOT / "conf" / "guard" / "default.yaml").read_text())  # the implications a study gets
VARIANT = {"batch_invariant": "off", "reduction": "stacked_split_k", "batch_window_ms": "20"}
MiB = 2**20


def _start(arm: str, engine_args: dict[str, Any], log_facts: dict[str, str], memory_mib: int = 400, start: int = 0,
           torch: str = "2.13.0") -> ArmStart:
    config = {"engine": "reference", "image": "process", "engine_args": {"seed": 0, **engine_args}}
    fingerprint = {"log_facts": {"engine_version": "0.1.0", **log_facts}, "version": {"version": "0.1.0"},
                   "probe": {"packages": {"torch": torch}, "cpus_usable": 2}}
    return ArmStart.of({"arm": arm, "start": start, "config_json": json.dumps(config), "engine": "reference",
                        "image_id": "process:sha256:abc", "fingerprint_json": json.dumps(fingerprint),
                        "peak_memory_bytes": memory_mib * MiB})


def _run(tmp_path: Path, starts: list[ArmStart], variables: dict[str, list[str]], **study: Any) -> RecordedRun:
    paths = RunPaths(tmp_path / "run")
    paths.hydra.mkdir(parents=True)
    doc = {"study": {**{k: DEFAULTS[k] for k in ("implications", "ignore_fields", "ignore_leaves", "held_facts")},
                     "variables": variables, **study}}
    (paths.hydra / "config.yaml").write_text(yaml.safe_dump(doc))
    return RecordedRun(paths, RunMeta(), tuple(starts), Reads(paths))


def test_a_switch_that_also_widens_the_batch_window_names_the_window(tmp_path: Path) -> None:
    run = _run(tmp_path, [
        _start("variant", {"no-batch-invariant": True}, VARIANT),
        _start("deterministic", {"no-batch-invariant": True, "deterministic": True},
               {"deterministic": "on", "batch_invariant": "on", "reduction": "per_sequence", "batch_window_ms": "50"})],
        {"deterministic": ["engine_args.deterministic"]})
    audit = side_effects(run, "variant", "deterministic")
    assert audit.names == ["log_facts.batch_window_ms"]
    assert (audit.moved[0].kind, audit.moved[0].a, audit.moved[0].b) == (OBSERVED, "20", "50")
    assert {m.name for m in audit.explained} == {"engine_args.deterministic", "log_facts.deterministic",
                                                 "log_facts.batch_invariant", "log_facts.reduction"}
    assert "also changed log_facts.batch_window_ms (20 -> 50)" in audit.sentence()
    assert json.loads(json.dumps(audit.to_json()))["names"] == ["log_facts.batch_window_ms"]


def test_a_clean_switch_names_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start("variant", {"no-batch-invariant": True}, VARIANT, memory_mib=400),
                          _start("invariant", {}, {**VARIANT, "batch_invariant": "on", "reduction": "per_sequence"},
                                 memory_mib=430)],
               {"invariant": ["engine_args.batch-invariant"]})
    audit = side_effects(run, "variant", "invariant")
    assert audit.moved == [] and audit.unknown == []
    assert {m.name for m in audit.explained} == {"engine_args.batch-invariant", "log_facts.batch_invariant",
                                                 "log_facts.reduction"}
    assert audit.sentence().endswith("changed nothing else the guard sees")


def test_memory_moves_only_when_every_start_is_apart(tmp_path: Path) -> None:
    starts = [_start("a", {}, VARIANT, memory_mib=400), _start("a", {}, VARIANT, memory_mib=420, start=1),
              _start("b", {"prefix": 1}, VARIANT, memory_mib=2448), _start("b", {"prefix": 1}, VARIANT,
                                                                           memory_mib=2460, start=1)]
    audit = side_effects(_run(tmp_path, starts, {"b": ["engine_args.prefix"]}), "a", "b")
    assert [(m.kind, m.name, m.a, m.b) for m in audit.moved] == [
        (MEMORY, "peak_memory_bytes", "400-420 MiB (2 starts)", "2448-2460 MiB (2 starts)")]
    overlapping = [*starts[:2], _start("b", {"prefix": 1}, VARIANT, memory_mib=2448),
                   _start("b", {"prefix": 1}, VARIANT, memory_mib=410, start=1)]
    assert side_effects(_run(tmp_path / "o", overlapping, {"b": ["engine_args.prefix"]}), "a", "b").moved == []


def test_an_undeclared_flag_is_named_with_its_setting_and_a_held_fact_always(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start("a", {}, {**VARIANT, "moe_backend": "TRITON"}),
                          _start("b", {"max-num-seqs": 8, "fused-finalize": True},
                                 {**VARIANT, "moe_backend": "CUTLASS", "fused_finalize": "on"})],
               {"b": ["engine_args.fused-finalize"]}, held_facts=["moe_backend"])
    audit = side_effects(run, "a", "b")
    assert [(m.kind, m.name, m.setting) for m in audit.moved] == [
        (CONFIG, "engine_args.max-num-seqs", "max_batch"), (HELD, "log_facts.moe_backend", None)]


def test_an_image_lets_everything_move_and_the_audit_still_says_what_did(tmp_path: Path) -> None:
    a, b = _start("a", {}, VARIANT), _start("b", {}, VARIANT, torch="2.14.0")
    b = ArmStart.of({**_row(b), "config_json": json.dumps({**b.config, "image": "other:1"})})
    audit = side_effects(_run(tmp_path, [a, b], {"b": ["image"]}), "a", "b")
    assert [(m.name, m.allowed_by) for m in audit.moved] == [("packages.torch", "image")]


def _row(start: ArmStart) -> dict[str, Any]:
    return {"arm": start.arm, "start": start.start, "config_json": start.config_json, "engine": start.engine,
            "image_id": start.image_id, "fingerprint_json": json.dumps(start.fingerprint),
            "peak_memory_bytes": start.peak_memory_bytes}


def test_bad_arms_and_a_run_dir_without_its_config_are_refused(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start("a", {}, VARIANT), _start("b", {}, VARIANT)], {})
    with pytest.raises(ConfigError, match=re.escape("arm_b='c' names nothing that exists. Available: a, b")):
        side_effects(run, "a", "c")
    (run.paths.hydra / "config.yaml").unlink()
    with pytest.raises(RecordError, match=re.escape("no .hydra/config.yaml")):
        side_effects(run, "a", "b")


def test_what_the_knob_listings_say_is_installed_is_compared(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start("a", {}, VARIANT), _start("b", {"prefix": 1}, VARIANT)], {"b": ["engine_args.prefix"]})
    listed = {"checked": True, "listed_from": "refengine 0.1.0", "versions": {"refengine": "0.1.0", "torch": "2.13.0"}}
    guard = GuardResult(knobs={"a": KnobCheck(**listed), "b": KnobCheck(**{**listed, "versions": {
        "refengine": "0.1.0", "torch": "2.14.0"}})})
    write_guard(run.paths, guard)
    assert [(m.kind, m.name, m.a, m.b) for m in side_effects(run, "a", "b").moved] == [
        (KNOBS, "knobs.versions.torch", "2.13.0", "2.14.0")]
