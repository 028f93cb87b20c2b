"""The GEMM probe on the CPU (tiny shapes): repeats, M-dependence, the scale-layout negative control,
unsupported operations, and the runner's table and report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from orchestrator import probes
from orchestrator.config.arms import runtime_for
from orchestrator.config.probe import load_probe_config
from orchestrator.config.schema import RuntimeConfig
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, read_run
from orchestrator.report.build import build
from orchestrator.report.html import markdown_to_html
from orchestrator.run import kernel_probes

pytest.importorskip("torch")

SPEC = {"shapes": {"tiny": [256, 256]}, "m": [1, 2, 3, 8], "repeats": 4, "hash_repeats": 2, "device": "cpu",
        "arms": ["bf16", "fp32", "fp8_tensor", "fp8_rowwise", "fp8_block", "fp8_block_ue8m0", "fp8_block_rowmajor"]}


def run_probe(**spec: Any) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-c", probes.bundle("gemm"), "--spec", json.dumps({**SPEC, **spec})],
                          capture_output=True, text=True, timeout=300, cwd="/")  # as shipped: no checkout
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def cells() -> list[dict[str, Any]]:
    rows = run_probe(perturb_allocator=True)
    assert rows[0]["kind"] == "env" and rows[-1]["kind"] == "done"
    return [r for r in rows if r["kind"] == "cell"]


def by(cells: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    return [c for c in cells if c["arm"] == arm]


def test_fixed_m_repeats_give_one_digest(cells: list[dict[str, Any]]) -> None:
    for cell in cells:
        assert cell["unsupported"] is None
        assert cell["repeats"] == 4 and cell["distinct_digests"] == 1 and cell["divergent_repeats"] == 0, cell
        assert cell["digests"] == [cell["first_digest"]] and len(cell["first_digest"]) == 16
        assert cell["hash_repeats"] == 2 and cell["hash_divergent"] == 0


def test_fp32_row0_changes_with_m_on_the_cpu(cells: list[dict[str, Any]]) -> None:
    fp32 = {c["M"]: c for c in by(cells, "fp32")}
    assert fp32[1]["row0_bits_equal_m1"] is True
    assert any(c["row0_bits_equal_m1"] is False for m, c in fp32.items() if m >= 2)  # DESIGN §7
    assert all(c["max_ulps_vs_float64"] < 1 for c in fp32.values())


def test_row_major_scale_mistake_is_flagged_and_production_layout_is_not(cells: list[dict[str, Any]]) -> None:
    for arm in ("fp8_block", "fp8_block_ue8m0", "fp8_tensor", "fp8_rowwise", "bf16"):
        for cell in by(cells, arm):
            assert cell["layout_ok"] and not cell["flagged"] and cell["max_ulps_vs_float64"] <= 1.0, cell
    negative = by(cells, "fp8_block_rowmajor")
    assert negative and all(c["negative_control"] and c["flagged"] for c in negative)
    assert all(c["max_ulps_vs_float64"] > 10 for c in negative)
    assert by(cells, "fp8_block")[0]["kernel_layout"].startswith("x:M-major")
    assert {c["scale_values"] for c in by(cells, "fp8_block_ue8m0")} == {"ue8m0"}


def test_unsupported_is_recorded_not_crashed() -> None:
    rows = run_probe(arms=["fp8_block", "bf16"], backend="scaled_mm", m=[1, 2], repeats=2)
    cells = [r for r in rows if r["kind"] == "cell"]
    block = by(cells, "fp8_block")
    assert len(block) == 2 and all(c["unsupported"] for c in block)  # torch has no CPU blockwise kernel
    assert all(c["unsupported"] is None and c["distinct_digests"] == 1 for c in by(cells, "bf16"))


def test_runner_records_table_and_report(tmp_path: Path) -> None:
    config = load_probe_config("cpu_small", ["shapes={tiny: [256, 256]}", "m=[1, 4]", "repeats=3",
                                                    "arms=[bf16, fp8_block_rowmajor]", "processes=2"])
    runtime = runtime_for(RuntimeConfig(kind="process"))
    at = kernel_probes.where(config, runtime, local=True)
    assert at.image == "local" and at.python == sys.executable and at.identity.startswith("process:sha256:")
    outputs = kernel_probes.run_probe(config, runtime, "r1", at)
    paths = RunPaths(tmp_path)
    rows = kernel_probes.rows_from_outputs(outputs, config.name, "r1", at)
    kernel_probes.record(paths, rows, outputs)
    table = pq.read_table(paths.table("probes")).to_pylist()
    assert len(table) == 8 and {r["process"] for r in table} == {1, 2}
    assert all(r["processes_agree"] and r["image_id"] == at.identity for r in table)
    assert all(r["upper_bound_95"] == pytest.approx(1 - 0.05 ** (1 / 3)) for r in table)
    text = (tmp_path / "probes.md").read_text()
    assert "negative control" in text and "assumes one common divergence rate" in text
    assert (tmp_path / "probes-raw-2.jsonl").is_file()
    # the run dir's report carries the probes' section once
    result = build(Recorded.of([read_run(paths, {"study": "probe", "run_id": "r1"})]))
    report = paths.report_md.read_text()
    assert sum(line.startswith("## Kernel probes") for line in report.splitlines()) == 1
    assert "<td>---:</td>" not in paths.report_html.read_text() and result.probes == table


def test_html_keeps_log_excerpts_verbatim() -> None:
    assert markdown_to_html("- root cause:\n\n```\nTypeError: <x> & y\n```\n") == [
        "<p class='item'>&bull; root cause:</p>", "<pre>", "TypeError: &lt;x&gt; &amp; y", "</pre>"]


def test_html_tables_drop_every_alignment_row() -> None:
    body = markdown_to_html("| a | b | c |\n| --- | ---: | :---: |\n| 1 | 2 | 3 |\n")
    assert body == ["<table><thead><tr><th>a</th><th>b</th><th>c</th></tr></thead><tbody>",
                    "<tr><td>1</td><td>2</td><td>3</td></tr>", "</tbody></table>"]


def test_probe_in_an_arm_takes_what_the_arm_inherits() -> None:
    config = load_probe_config("cpu_small", arm="vllm_nonfused")  # its gpus come from its template, vllm
    assert (config.image, config.gpus) == ("orchestrator/vllm-nonfused:v0.34.0", "all")


def test_config_errors_name_the_choices() -> None:
    with pytest.raises(Exception, match="Did you mean 'cpu_small'"):
        load_probe_config("cpu_smal")
    with pytest.raises(Exception, match="unknown probe key 'repeat'"):
        load_probe_config("cpu_small", ["repeat=3"])
