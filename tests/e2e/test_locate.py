"""Where inside the model, with ground truth: the hooked Transformers engine (arms/transformers-hooked) as local
processes on tiny-llama (fp32, CPU), through `orchestrator run study=locate_tiny` and `orchestrator locate`.
- Batch invariance on: a concurrent request's digests equal a sequential one's at every module call.
- On, with one Linear planted batch-variant (its reduction split by the window's size): `locate` names that module,
  its input identical and its output different, and no other.
- Off (one padded batch): `locate` names the first module whose kernel varies with the batch's rows on this CPU, a
  Linear whose input is identical, and the op probe at its shapes (`--probe`, in the arm's interpreter) finds the
  same GEMM M-variant here.
In its image (Docker), the planted module is named the same way.
tiny-moe batched: the experts' mixed rows skipped, their own call named. Under continuous batching (packed rows):
a split named inside a layer, the packed row said.
The planted arm digested at the decoder layers, then inside the layer named.
CI time: eight engine starts and nine `locate` calls (about 90 s here)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import CACHE, orchestrator, ran, require_engine_build

VENV_PYTHON = CACHE / "transformers-serve-5.25.0" / "venv" / "bin" / "python"
PLANTED = "model.layers.0.mlp.down_proj"

pytestmark = pytest.mark.transformers


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    return ran(tmp_path_factory, "locate", "study=locate_tiny")


def _locate(run: Path, cell: str, *extra: str) -> list[str]:
    result = orchestrator("locate", str(run), "--cell", cell, *extra, timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def test_every_flagged_request_has_digests_of_every_step(run: Path) -> None:
    responses = pq.read_table(run / "data" / "responses", columns=["request_id", "role", "completion_tokens",
                                                                   "request_json"]).to_pylist()
    measured = [r for r in responses if r["role"] == "measured"]
    assert measured and all(json.loads(r["request_json"]).get("digest") is True for r in measured)
    assert not any(json.loads(r["request_json"]).get("digest") for r in responses if r["role"] != "measured")
    digests = pq.read_table(run / "data" / "digests", columns=["request_id", "step", "module"]).to_pylist()
    steps: dict[str, set[int]] = {}
    for row in digests:
        steps.setdefault(row["request_id"], set()).add(row["step"])
    for r in measured:  # a prefill and one step per further token
        assert steps.get(r["request_id"]) == set(range(r["completion_tokens"])), r["request_id"]
    modules = {row["module"] for row in digests}
    assert {"model.embed_tokens", PLANTED, "model.layers.1.self_attn", "lm_head"} <= modules


def test_batch_invariant_digests_are_identical_everywhere(run: Path) -> None:
    for prompt in ("capital", "count"):
        first = _locate(run, f"invariant/{prompt}/concurrent")[0]
        assert first.startswith("identical digests:"), first
    lines = _locate(run, "invariant/count/sequential")  # against the first phase that ran beside others
    assert lines[0].startswith("identical digests:") and "against one of phase concurrent" in lines[3], lines
    report = (run / "report.md").read_text()  # every cell beside others, its answer line
    assert "## Where inside the model" in report and "- `planted/count/concurrent`: first split:" in report


def test_the_planted_module_is_named_and_no_other(run: Path) -> None:
    for prompt in ("capital", "count"):
        lines = _locate(run, f"planted/{prompt}/concurrent")
        assert lines[0].startswith("first split: step 0 (prefill), " + PLANTED + " (Linear): input identical, "
                                   "output differs; window of 4 vs 1"), lines[0]  # each request computed alone
        assert lines[-1].startswith("op probe: M equal on both sides"), lines  # not the GEMM's M: no probe


def test_without_invariance_the_first_m_variant_gemm_is_named_and_the_probe_agrees(run: Path) -> None:
    lines = _locate(run, "variant/capital/concurrent", "--probe")
    first = lines[0]
    assert "(Linear): input identical, output differs; batch 4 vs 1" in first, first
    said = [line.strip() for line in lines if line.strip().startswith("on this machine:")]
    assert len(said) == 1 and said[0].startswith("on this machine: M-variant: row 0 differs"), lines  # probed: varies


def test_on_a_continuous_batching_run_the_split_is_named_in_the_packed_row(tmp_path: Path) -> None:
    """The variant arm under Transformers' continuous batching (docs/locate.md's command, one arm): requests share
    packed forwards [1, T, H], each digested over its own span; `locate` names a first split inside a layer with
    the packed row said (on this CPU: the paged attention between v_proj and o_proj, or q_proj)."""
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    one_arm = ["study=locate_tiny", "~arms.invariant", "~arms.planted", "~study.variables.planted",
               "~study.variables.variant", "study.baseline=variant"]
    result = orchestrator("run", *one_arm, "arms.variant.engine_args.continuous-batching=true",
                          f"hydra.run.dir={tmp_path}", timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    digests = pq.read_table(tmp_path / "data" / "digests", columns=["batch_size", "out_shape"]).to_pylist()
    packed = [r for r in digests if r["batch_size"] > 1 and r["out_shape"] and r["out_shape"][0] == 1]
    assert packed, "no forward packed several requests in one row"
    lines = _locate(tmp_path, "variant/capital/concurrent")
    first = lines[0]
    assert first.startswith("first split: step ") and "model.layers." in first, lines
    assert "differs" in first and "(packed in one row)" in first, lines  # a split found, in a packed forward


def test_a_scoped_run_names_the_layer_and_the_run_it_proposes_names_the_module(tmp_path: Path) -> None:
    """Inside a realistic load (docs/locate.md): the planted arm digested at the decoder layers only
    (`digest-depth: 3`); `locate` names the planted module's layer and the overrides of a run that digests inside
    it; that run, with them, names the module and proposes nothing more."""
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    one_arm = ["study=locate_tiny", "~arms.invariant", "~arms.variant", "~study.variables.planted",
               "~study.variables.variant", "study.baseline=planted"]
    layers, inside = tmp_path / "layers", tmp_path / "inside"
    result = orchestrator("run", *one_arm, "+arms.planted.engine_args.digest-depth=3", f"hydra.run.dir={layers}",
                          timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    modules = set(pq.read_table(layers / "data" / "digests", columns=["module"]).column("module").to_pylist())
    assert "model.layers.0" in modules and all(m.count(".") < 3 for m in modules), sorted(modules)
    lines = _locate(layers, "planted/count/concurrent")
    assert lines[0].startswith("first split: step 0 (prefill), model.layers.0 (LlamaDecoderLayer): input "
                               "identical, output differs"), lines
    proposed = [line for line in lines if line.startswith("look inside: ")]
    assert len(proposed) == 1, lines
    overrides = proposed[0].split(" run the study again with ")[1].split()
    assert overrides == ["++arms.planted.engine_args.digest-depth=0",
                         "++arms.planted.engine_args.digest-under=model.layers.0"], proposed
    result = orchestrator("run", *one_arm, *overrides, f"hydra.run.dir={inside}", timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = _locate(inside, "planted/count/concurrent")
    assert lines[0].startswith(f"first split: step 0 (prefill), {PLANTED} (Linear): input identical"), lines
    assert not any(line.startswith("look inside: ") for line in lines), lines


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_the_hooked_engine_in_its_image_names_the_planted_module(tmp_path: Path) -> None:
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    one_arm = ["study=locate_tiny", "runtime=docker", "arm@arms.planted=transformers_hooked", "~arms.invariant",
               "~arms.variant", "~study.variables.planted", "~study.variables.variant",
               "study.baseline=planted"]
    result = orchestrator("run", *one_arm, f"hydra.run.dir={tmp_path}", timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    image = pq.read_table(tmp_path / "data" / "arms", columns=["image_ref"]).column("image_ref").to_pylist()
    assert image == ["orchestrator/transformers-hooked:0.1.0"], image
    assert _locate(tmp_path, "planted/count/concurrent")[0].startswith(f"first split: step 0 (prefill), {PLANTED}")


def test_a_moe_s_experts_see_the_batch_s_tokens_mixed_and_are_skipped_not_named(tmp_path: Path) -> None:
    """tiny-moe (Qwen3-MoE, 8 experts, top-2) batched without invariance: the experts' activation sees the batch's
    tokens grouped by expert, no rows of the request's own; `locate` skips those calls, counts them, and does not
    name them (before the fix, it named 'between gate and act_fn')."""
    require_engine_build(VENV_PYTHON, "transformers-serve", "transformers serve")
    one_arm = ["study=locate_tiny", "~arms.invariant", "~arms.planted", "~study.variables.planted",
               "~study.variables.variant", "study.baseline=variant", "arms.variant.engine_args.model=/models/tiny-moe"]
    result = orchestrator("run", *one_arm, f"hydra.run.dir={tmp_path}", timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    digests = pq.read_table(tmp_path / "data" / "digests", columns=["module", "rows_start", "batch_size"]).to_pylist()
    mixed = {r["module"] for r in digests if r["rows_start"] is None}
    assert "model.layers.0.mlp.experts.act_fn" in mixed and all(r["batch_size"] > 1 for r in digests
                                                                if r["rows_start"] is None)
    text = "\n".join(_locate(tmp_path, "variant/capital/concurrent"))
    assert "skipped: their rows mix the batch's requests" in text, text
    assert text.startswith("first split: step 0 (prefill), model.layers.0.mlp.experts (Qwen3MoeExperts): input "
                           "identical, output differs; batch 4 vs 1"), text  # the experts' own call, per token
