"""The single-variable guard against real containers of the reference engine: declared (before the run),
observed (fingerprints after it), shared caches, knobs the engine does not know, `orchestrator fingerprint`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]

SMALL = ("protocol=probe", "protocol.phases.sequential.repeats=2")


def run(tmp_path: Path, *overrides: str) -> tuple[int, str, dict[str, Any]]:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *SMALL, *overrides)
    guard = json.loads((tmp_path / "guard.json").read_text()) if (tmp_path / "guard.json").is_file() else {}
    return result.returncode, result.stderr, guard


def verdicts(guard: dict[str, Any], check: str) -> dict[str, str]:
    return {p["arm"]: p["verdict"] for p in guard[check]["pairs"]}


def test_finalize_only_with_fresh_caches_is_single_variable_in_both_checks(tmp_path: Path) -> None:
    code, stderr, guard = run(tmp_path, "study=guard_finalize_only")
    assert code == 0, stderr[-3000:]
    assert verdicts(guard, "declared") == {"fused": "single-variable"}
    assert verdicts(guard, "observed") == {"fused": "single-variable"}, guard["observed"]
    [observed] = guard["observed"]["pairs"]
    assert set(observed["differing"]) == {"log_facts.fused_finalize", "log_facts.autotune_key"}  # both implied
    assert guard["declared"]["shared_caches"] == []  # a fresh cache dir per arm
    assert all(k["checked"] and not k["unknown"] for k in guard["knobs"].values())
    assert "guard: Single-variable in config and observed" in stderr
    assert (tmp_path / "scratch" / "unfused" / "autotune").is_dir() and (tmp_path / "scratch" / "fused").is_dir()
    # the matrix key stored per arm is the one `orchestrator fingerprint --image` gives for that image
    arms = pq.read_table(tmp_path / "data" / "arms").to_pylist()
    printed = orchestrator("fingerprint", "--image", "orchestrator/reference-engine:0.1.0", "--json")
    assert printed.returncode == 0, printed.stderr
    fingerprint = json.loads(printed.stdout)
    assert {a["matrix_key"] for a in arms} == {fingerprint["matrix_key"]}
    assert fingerprint["fingerprint"]["probe"]["packages"]["refengine"] == "0.1.0"
    probe = json.loads(arms[0]["fingerprint_json"])["probe"]
    assert probe["packages"]["torch"].startswith("2.") and probe["env"]["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"]


def test_undeclared_backend_pin_is_refused_before_anything_starts(tmp_path: Path) -> None:
    code, stderr, _ = run(tmp_path, "study=guard_finalize_and_pin")
    assert code == 2
    assert "engine_args.fused-finalize (<absent> -> true) [declared]" in stderr
    assert "engine_args.moe-backend (<absent> -> flashinfer_cutlass) [NOT declared]" in stderr
    assert "Traceback" not in stderr and not (tmp_path / "data").exists()


def test_allowed_confound_runs_and_says_confounded(tmp_path: Path) -> None:
    code, stderr, guard = run(tmp_path, "study=guard_finalize_and_pin", "study.allow_confounded=true")
    assert code == 0, stderr[-3000:]
    assert "warning: CONFOUNDED (allowed): arm 'fused' also differs in engine_args.moe-backend" in stderr
    assert "guard: CONFOUNDED" in stderr
    assert verdicts(guard, "declared") == {"fused": "confounded"}


def test_derived_cache_key_is_confounded_after_the_run(tmp_path: Path) -> None:
    code, stderr, guard = run(tmp_path, "study=guard_derived_key")
    assert code == 0, stderr[-3000:]
    assert verdicts(guard, "declared") == {"pinned": "single-variable"}
    [observed] = guard["observed"]["pairs"]
    assert observed["verdict"] == "confounded" and observed["extra"] == ["log_facts.autotune_key"]
    assert "guard: CONFOUNDED: pinned vs auto observed: log_facts.autotune_key" in stderr


def test_backend_pin_with_its_implication_declared_is_single_variable(tmp_path: Path) -> None:
    code, stderr, guard = run(tmp_path, "study=backend_pin")
    assert code == 0, stderr[-3000:]
    assert verdicts(guard, "observed") == {"pinned": "single-variable"}


def test_shared_cache_across_finalize_modes_is_flagged(tmp_path: Path) -> None:
    code, stderr, guard = run(tmp_path, "study=guard_shared_cache")
    assert code == 0, stderr[-3000:]
    assert "warning: shared cache scratch/shared/autotune across arms that differ in engine_args.fused-finalize" \
        in stderr
    [cache] = guard["declared"]["shared_caches"]
    assert cache["flagged"] and cache["arms"] == ["unfused", "fused"]


def test_misspelled_variable_gets_the_closest_valid_leaf(tmp_path: Path) -> None:
    code, stderr, _ = run(tmp_path, "study=guard_finalize_only", "study.variables.fused=[engine_args.fused-finalise]")
    assert code == 2 and "Did you mean 'engine_args.fused-finalize'?" in stderr


def test_misspelled_env_knob_is_refused_with_the_closest_known_name(tmp_path: Path) -> None:
    typo = "env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS=/cache/autotune"  # in both arms: not a confound
    code, stderr, guard = run(tmp_path, "study=guard_finalize_only", f"+arms.unfused.{typo}", f"+arms.fused.{typo}")
    assert code == 2, stderr[-3000:]
    assert "env VLLM_FLASHINFER_AUTOTUNE_CACHE_DIRS is not known to the engine" in stderr
    assert "Did you mean 'VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR'?" in stderr
    assert stderr.count("error: ") == 2  # one line per arm's name, each with its fix (docs/conventions.md)
    # refused before anything started, before Hydra wrote the run dir: nothing in it, so it can be used again
    assert guard == {} and list(tmp_path.iterdir()) == []


HELD_STUDY = """# @package _global_
defaults:
  - /arm@arms.stock: reference
  - /arm@arms.patched: reference
  - override /protocol: probe
study:
  name: held_backend
  baseline: stock
  variables:
    patched: [image, build]
  held_facts: [moe_backend, autotune_key]
arms:
  patched:
    image: orchestrator/held-fact-test:0.1.0
    build: {{context: {context}}}
"""
# Another image of the same engine whose entrypoint selects another MoE backend: the arm configs differ in
# the image alone, as the seed's patched vLLM image did, yet the engine inside chose another kernel path.
HELD_DOCKERFILE = """ARG BASE_IMAGE
FROM orchestrator/reference-engine:0.1.0
ENTRYPOINT ["python3", "-m", "refengine", "--moe-backend", "triton"]
"""


def test_a_held_log_fact_that_another_image_changes_is_confounded(tmp_path: Path, docker_client: Any) -> None:
    context, conf = tmp_path / "image", tmp_path / "conf"
    context.mkdir()
    (context / "Dockerfile").write_text(HELD_DOCKERFILE)
    (conf / "study").mkdir(parents=True)
    (conf / "study" / "held_backend.yaml").write_text(HELD_STUDY.format(context=context))
    try:
        code, stderr, guard = run(tmp_path / "run", "--config-dir", str(conf), "study=held_backend")
        assert code == 0, stderr[-3000:]  # the observed check reports; it does not change the status
        assert verdicts(guard, "declared") == {"patched": "single-variable"}
        [observed] = guard["observed"]["pairs"]
        assert observed["verdict"] == "confounded", observed
        assert observed["extra"] == ["log_facts.moe_backend"]
        assert observed["differing"]["log_facts.moe_backend"] == ["FLASHINFER_CUTLASS", "TRITON"]
        # no autotune cache dir, so neither engine logs a key: held, yet not observed, and said so
        assert observed["unknown"] == ["log_facts.autotune_key (held; not observed in the log of stock, patched)"]
        assert "guard: CONFOUNDED: patched vs stock observed: log_facts.moe_backend (FLASHINFER_CUTLASS -> TRITON)" \
            in stderr
        report = (tmp_path / "run" / "report.md").read_text()
        assert "**CONFOUNDED**: patched vs stock observed: log_facts.moe_backend" in report
    finally:
        docker_client.images.remove("orchestrator/held-fact-test:0.1.0", force=True)
