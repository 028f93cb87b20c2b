"""The ops probes on the CPU (tiny sizes): every op kind through the bundle as shipped, the harness's two
negative controls, the exit-3 gate, the report's ops section, and the attribution line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import probes
from orchestrator.analysis.attribution import attribute
from orchestrator.analysis.probes import gate_failures, verdicts
from orchestrator.analysis.results import ArmSummary, Cell, Comparison, ScheduleCheck
from orchestrator.config.probe import RecordedArm, load_probe_config
from orchestrator.errors import ConfigError, ExitStatus
from orchestrator.report.probes import render_attribution, render_markdown
from orchestrator.run import kernel_probes
from orchestrator.verbs import probe as probe_verb

pytest.importorskip("torch")

OPS = {"decode": {"op": "decode_attention", "arms": ["sdpa_math", "sdpa_default", "flash_attn"], "heads": 4,
                  "kv_heads": 2, "head_dim": 16, "context": 64},
       "prefill": {"op": "prefill_attention", "arms": ["sdpa_math"], "heads": 2, "kv_heads": 2, "head_dim": 16,
                   "context": 16},
       "norm": {"op": "rmsnorm", "hidden": 128, "expect_invariant": True},
       "sampling": {"op": "log_softmax_topk", "vocab": 1000, "top_k": 5},
       "moe": {"op": "moe_grouped_gemm", "arms": ["per_expert_loop"], "experts": 8, "hidden": 64,
               "intermediate": 32, "m": [1, 4, 16]},
       "vary": {"op": "control_must_vary", "width": 512},
       "steady": {"op": "control_must_not_vary", "width": 512, "expect_invariant": True}}


def run_ops(ops: dict[str, Any], **spec: Any) -> list[dict[str, Any]]:
    body = {"ops": ops, "m": [1, 2, 5], "repeats": 4, "hash_repeats": 1, "device": "cpu", **spec}
    done = subprocess.run([sys.executable, "-c", probes.bundle("ops"), "--spec", json.dumps(body)],
                          capture_output=True, text=True, timeout=300, cwd="/")  # as shipped: no checkout
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[0]["kind"] == "env" and rows[-1]["kind"] == "done"
    return [r for r in rows if r["kind"] == "cell"]


@pytest.fixture(scope="module")
def cells() -> list[dict[str, Any]]:
    return run_ops(OPS)


def of(cells: list[dict[str, Any]], shape: str, arm: str | None = None) -> list[dict[str, Any]]:
    return [c for c in cells if c["shape"] == shape and arm in (None, c["arm"])]


def test_every_op_runs_with_repeats_row0_and_cost(cells: list[dict[str, Any]]) -> None:
    for shape in ("decode", "prefill", "norm", "sampling", "moe", "steady"):
        ran = [c for c in of(cells, shape) if c["unsupported"] is None]
        assert ran, shape
        for cell in ran:
            assert cell["repeats"] == 4 and cell["distinct_digests"] == 1, cell
            assert cell["row0_bits_equal_m1"] is True and cell["device_s_per_call"] > 0, cell
    assert [c["M"] for c in of(cells, "moe")] == [1, 4, 16]  # an entry's own M list
    assert {c["context"] for c in of(cells, "decode")} == {64}
    norm = of(cells, "norm")[0]
    assert norm["expect_invariant"] is True and json.loads(norm["params"])["hidden"] == 128


def test_a_kernel_the_image_lacks_is_unsupported_with_the_reason(cells: list[dict[str, Any]]) -> None:
    flash = of(cells, "decode", "flash_attn")
    assert len(flash) == 3 and all("CUDA only" in c["unsupported"] for c in flash)


def test_the_must_vary_control_varies_and_the_must_not_vary_control_does_not(cells: list[dict[str, Any]]) -> None:
    vary, steady = of(cells, "vary"), of(cells, "steady")
    assert all(c["distinct_digests"] > 1 and c["control"] == "must_vary" for c in vary)
    assert all(c["distinct_digests"] == 1 and c["row0_bits_equal_m1"] for c in steady)
    assert gate_failures([{**c, "process": 1} for c in cells]) == []


def test_the_gate_names_an_op_expected_invariant_that_is_not(cells: list[dict[str, Any]]) -> None:
    rows = [{**c, "process": 1} for c in cells]
    rows = [{**r, "expect_invariant": True} if r["shape"] == "vary" else r for r in rows]
    failed = gate_failures(rows)
    assert len(failed) == 1 and failed[0].startswith("vary/randperm_sum (control_must_vary) is expected invariant")
    blind = [{**r, "distinct_digests": 1, "row0_bits_equal_m1": True} if r["shape"] == "vary" else r
             for r in [{**c, "process": 1} for c in cells]]
    assert any("must-vary control did not vary" in line for line in gate_failures(blind))


def _probe_verb(out: Path, *sets: str) -> ExitStatus:
    """`orchestrator probe --preset ops_cpu_small --local --out OUT --set ...` (verbs/probe.py)."""
    argv = ["--preset", "ops_cpu_small", "--local", "--out", str(out)]
    for value in ("processes=1", *sets):
        argv += ["--set", value]
    return probe_verb.main(argv).status


def test_probe_verb_exits_3_when_an_expected_invariant_op_varies(tmp_path: Path) -> None:
    varying = "ops={v: {op: control_must_vary, width: 256, expect_invariant: true}}"
    assert _probe_verb(tmp_path / "bad", "m=[1, 2]", "repeats=3", varying) == ExitStatus.GATE_FAILED
    invariant = "ops={n: {op: rmsnorm, hidden: 64, expect_invariant: true}}"
    assert _probe_verb(tmp_path / "good", "m=[1, 2]", "repeats=3", invariant) == ExitStatus.OK
    assert "## Kernel probes (ops)" in (tmp_path / "good" / "probes.md").read_text()
    assert (tmp_path / "good" / "probes-ops-raw-1.jsonl").is_file()


def test_report_has_a_section_per_op(cells: list[dict[str, Any]]) -> None:
    text = render_markdown([{**c, "process": 1, "torch": "t"} for c in cells])
    assert "## Kernel probes (GEMM)" not in text and text.startswith("## Kernel probes (ops)")
    for op in ("decode_attention", "prefill_attention", "rmsnorm", "log_softmax_topk", "moe_grouped_gemm"):
        assert f"\n### {op}\n" in text
    assert "varies (control ok)" in text and "CUDA only" in text


def test_presets_load_without_pyyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    config = load_probe_config("ops_h200", ["repeats=3"])
    assert config.probe == "ops" and config.repeats == 3 and config.ops and "decode_ctx8k" in config.ops
    assert config.spec()["ops"]["rmsnorm_7168"]["hidden"] == 7168 and "shapes" not in config.spec()


def test_keys_of_the_other_probe_are_refused() -> None:
    with pytest.raises(ConfigError, match="shapes: not a key of the ops probe"):
        load_probe_config("ops_cpu_small", ["shapes={a: [1, 1]}"])


@pytest.mark.parametrize(("entry", "said"), [
    ("{op: rmsnorm, expect_invariant: maybe}", "ops.x.expect_invariant 'maybe': must be true or false"),
    ("{op: rmsnorm, m: [0]}", "ops.x.m [0]: must be a non-empty list of positive batch sizes"),
    ("rmsnorm", "ops.x: give {op: KIND, ...}"),
])
def test_an_ops_entry_of_the_wrong_shape_is_refused_before_anything_runs(entry: str, said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_probe_config("ops_cpu_small", [f"ops={{x: {entry}}}"])


@pytest.mark.parametrize(("entry", "said"), [
    ("{op: rmsnrm}", "ops.py: ops.x: op 'rmsnrm' is not one of ['control_must_not_vary'"),
    ("{op: rmsnorm, arms: [nope], hiden: 3}", "unknown key 'hiden'; known: ['arms', 'dtype'"),
])
def test_an_op_or_key_the_probe_does_not_know_is_bad_input_naming_the_choices(entry: str, said: str,
                                                                              tmp_path: Path) -> None:
    """The probe knows its ops (it runs where torch is): it refuses the spec, and that is exit 2, not 4."""
    load_probe_config("ops_cpu_small", ["processes=1", f"ops={{x: {entry}}}"])  # the preset's checks pass it
    with pytest.raises(ConfigError, match=re.escape(said)):
        _probe_verb(tmp_path / "out", f"ops={{x: {entry}}}")
    assert not (tmp_path / "out").exists()  # nothing recorded, nothing left


def _study(sequential_divergent: int, schedule_verdict: str) -> tuple[Comparison, list[ArmSummary]]:
    cells = [Cell("variant", "p1", "sequential", 8, 0, 1, 1 + sequential_divergent, sequential_divergent, None, None),
             Cell("variant", "p1", "concurrent", 8, 0, 1, 1, 0, None, None, batch_size=8)]
    schedules = [ScheduleCheck("p1", schedule_verdict, 3, None, arm="variant", phase_a="sequential",
                               phase_b="concurrent")]
    return Comparison(cells=cells, schedules=schedules), [ArmSummary("variant", "completed", "img:1", "sha256:x", None)]


def test_attribution_names_batch_variant_ops_of_the_arms_image_as_a_candidate() -> None:
    rows = [{"shape": "decode_8k", "op": "decode_attention", "arm": "sdpa_flash", "M": m, "context": 8192,
             "image": "img:1", "process": 1, "repeats": 5, "distinct_digests": 1, "unsupported": None,
             "row0_bits_equal_m1": m < 4} for m in (1, 2, 4, 8)]
    rows += [{**r, "shape": "norm", "op": "rmsnorm", "arm": "manual", "context": None, "row0_bits_equal_m1": True}
             for r in rows]
    comparison, arms = _study(0, "differ")
    found = attribute(comparison, arms, rows)
    assert [(a.arm, [v.shape for v in a.candidates], a.candidates[0].ms_row0_differs) for a in found] == [
        ("variant", ["decode_8k"], [4, 8])]
    text = render_attribution(found)
    assert "decode_attention `decode_8k` arm sdpa_flash, context 8192 (row 0 changes at M 4,8)" in text
    assert "A candidate cause, not proof" in text
    assert attribute(*_study(0, "identical"), rows) == []  # nothing diverges: no line
    assert attribute(*_study(2, "differ"), rows) == []  # sequential cells disagree too: not a batching effect
    assert attribute(comparison, arms, [{**r, "image": "other"} for r in rows]) == []  # another image's probes
    assert verdicts(rows)[1].invariant is True


def test_attribution_matches_on_identity_so_a_process_arm_names_candidates_and_other_code_does_not() -> None:
    """A process arm's ref is free text ("process"): only the code identity says the probe ran its code. A row
    with an identity matches on it alone, so the same tag over other code (a rebuilt image) is not matched."""
    rows = [{"shape": "g", "op": "gemm", "arm": "fp32", "M": m, "image": "process", "image_id": "process:sha256:a",
             "process": 1, "repeats": 3, "distinct_digests": 1, "unsupported": None, "row0_bits_equal_m1": m == 1}
            for m in (1, 2)]
    comparison, _ = _study(0, "differ")
    arm = ArmSummary("variant", "completed", "process", "process:sha256:a", None)
    [found] = attribute(comparison, [arm], rows)
    assert found.identity == "process:sha256:a" and [v.shape for v in found.candidates] == ["g"]
    assert "Measured batch-variant in its code process:sha256:a: gemm `g` arm fp32" in render_attribution([found])
    other = ArmSummary("variant", "completed", "process", "process:sha256:b", None)
    assert attribute(comparison, [other], rows) == []  # another process arm's code, same ref
    docker = [{**r, "image": "img:1", "image_id": "sha256:y"} for r in rows]
    assert attribute(comparison, [ArmSummary("variant", "completed", "img:1", "sha256:x", None)], docker) == []


def test_a_study_arm_that_ran_in_an_image_is_not_probed_as_a_process() -> None:
    """`--local` would run this interpreter, not the image the study ran: bad input, before anything runs."""
    recorded = RecordedArm("variant", json.dumps({"image": "img:1"}), "sha256:abc", "image")
    config = load_probe_config("cpu_small", [], recorded)
    assert config.of_arm is not None and not config.of_arm.on_host and config.image == "img:1"
    with pytest.raises(ConfigError, match=re.escape("arm 'variant' of the study ran in image img:1 (sha256:abc): "
                                                    "probe it there, without --local")):
        kernel_probes.where(config, None, local=True)  # type: ignore[arg-type]  # refused before any runtime
