"""`orchestrator locate` on synthetic records: a run dir with answers and digest rows written through the record's
writers (a small attention-and-MLP model's leaf calls, per step), and the first split it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.locate import locate
from orchestrator.analysis.locate_probe import probe_verdict
from orchestrator.analysis.locate_results import BETWEEN, KERNEL, Located
from orchestrator.cli import main
from orchestrator.errors import ConfigError, RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, read_run
from orchestrator.record.tables import TableWriter
from orchestrator.report.locate import headline, render

PROMPT_TOKENS = 9
HIDDEN, HEAD_DIM, KV = 64, 16, 32
# (module, type, out width): one layer's leaf calls in forward order
MODULES = [("model.embed_tokens", "Embedding", HIDDEN), ("model.rotary_emb", "LlamaRotaryEmbedding", HEAD_DIM),
           ("model.layers.0.input_layernorm", "LlamaRMSNorm", HIDDEN),
           ("model.layers.0.self_attn.q_proj", "Linear", HIDDEN), ("model.layers.0.self_attn.k_proj", "Linear", KV),
           ("model.layers.0.self_attn.v_proj", "Linear", KV), ("model.layers.0.self_attn.o_proj", "Linear", HIDDEN),
           ("model.layers.0.mlp.down_proj", "Linear", HIDDEN), ("lm_head", "Linear", 128)]


def _digests(request_id: str, batch: int, steps: int = 3, split: tuple[int, str, str] | None = None,
             extra: str | None = None, layout: str = "padded") -> list[dict[str, Any]]:
    """Every call's rows; from `split` (step, module, "in" or "out") on, hashes differ (so do later inputs);
    `extra`: a module called a second time in step 0 (another split of the same work). `layout`: "padded", a
    static batch [batch, L, H]; "alone", the request computed alone in a window of `batch` ([1, L, H]);
    "packed", every request's tokens in one row ([1, batch * L, H], continuous batching)."""
    rows, changed = [], False
    for step in range(steps):
        length = PROMPT_TOKENS if step == 0 else 1
        lead, per_row = {"padded": (batch, length), "alone": (1, length), "packed": (1, batch * length)}[layout]
        modules = [*MODULES[:4], (extra, "Linear", HIDDEN), *MODULES[4:]] if extra and step == 0 else MODULES
        for call, (module, kind, width) in enumerate(modules):
            in_changed = changed or split == (step, module, "in")
            changed = in_changed or split == (step, module, "out")
            tag = "x" if changed else ""
            rows.append({
                "study": "s", "run_id": "r", "arm": "hooked", "request_id": request_id, "attempt": 0,
                "engine_request_id": f"cmpl-{request_id}", "step": step, "call": call, "module": module,
                "module_type": kind, "rows_start": 0, "rows_stop": length, "rows_total": lead * per_row,
                "in_shape": [lead, per_row, HIDDEN], "out_shape": [lead, per_row, width],
                "in_hash": None if kind == "Embedding" else ("x" if in_changed else "") + f"in-{step}-{module}",
                "in_sum": 1.0, "in_absmax": 1.0, "out_hash": f"{tag}out-{step}-{module}",
                "out_sum": 2.0 + (0.001 if changed else 0.0), "out_absmax": 1.0, "out_norm": 3.0,
                "out_head": [0.5, 0.25 + (1e-6 if changed else 0.0)], "batch_size": batch,
                "batch_request_ids": [f"cmpl-{i}" for i in range(batch)],
                "context_tokens": PROMPT_TOKENS + step})
    return rows


def _answer(phase: str, kind: str, batch: int, repeat: int, sig: str, token_ids: list[int] | None = None
            ) -> dict[str, Any]:
    ids = token_ids or [5, 6, 7]
    return {"study": "s", "run_id": "r", "arm": "hooked", "prompt_id": "p", "phase": phase, "phase_kind": kind,
            "batch_id": batch, "repeat": repeat, "request_id": f"hooked/p/{phase}/{batch}/{repeat}", "attempt": 0,
            "role": "measured", "start": 0, "sig_top_logprobs": sig, "sig_token_ids": sig, "sig_text": sig,
            "token_ids": ids, "tokens": [str(i) for i in ids], "token_logprobs": [-0.1] * len(ids),
            "top_logprobs": [[{"token": str(i), "logprob": -0.1}, {"token": "z", "logprob": -0.4}] for i in ids],
            "top_gaps": [0.3] * len(ids), "completion_text": "t", "cold": False}


STARTED_CPU = "hookedengine version 0.1, torch 2.13, transformers 5.25, device cpu, dtype float32"


def _run(tmp_path: Path, answers: list[dict[str, Any]], digests: list[dict[str, Any]],
         started: str = STARTED_CPU) -> RunPaths:
    paths = RunPaths(tmp_path / "run").make()
    paths.meta.write_text(json.dumps({"study": "s", "run_id": "r"}))
    for table, rows in (("responses", answers), ("digests", digests)):
        with TableWriter(paths, table, "hooked") as writer:
            for row in rows:
                writer.append(row)
    with TableWriter(paths, "logs", "hooked") as writer:
        writer.append({"run_id": "r", "arm": "hooked", "stream": "stderr", "seq": 0, "text": started})
    return paths


def _branches(tmp_path: Path, split: tuple[int, str, str] | None, token_ids: list[int] | None = None,
              extra: str | None = None) -> RunPaths:
    """A concurrent cell: three requests of batch 0 (size 4 with one more) signed A, one alone signed B."""
    answers = [_answer("conc", "concurrent", 0, r, "A") for r in range(3)]
    answers.append(_answer("conc", "concurrent", 1, 0, "B", token_ids))
    digests = _digests("hooked/p/conc/0/0", 4) + _digests("hooked/p/conc/1/0", 1, split=split, extra=extra)
    return _run(tmp_path, answers, digests)


def test_a_kernel_split_names_the_module_whose_input_is_identical_and_output_differs(tmp_path: Path) -> None:
    paths = _branches(tmp_path, (0, "model.layers.0.self_attn.q_proj", "out"))
    found = locate(paths, "hooked/p/conc")
    diff = found.difference
    assert diff is not None and diff.kind == KERNEL and diff.step == 0
    assert (diff.module, diff.module_type) == ("model.layers.0.self_attn.q_proj", "Linear")
    assert (diff.a.batch_size, diff.b.batch_size, diff.a.rows_total, diff.b.rows_total) == (4, 1, 36, 9)
    assert diff.max_abs_diff == pytest.approx(1e-6) and diff.rel_sum == pytest.approx(0.001 / 2.001)
    assert headline(found) == ("first split: step 0 (prefill), model.layers.0.self_attn.q_proj (Linear): input "
                               "identical, output differs; batch 4 vs 1, M 36 vs 9")
    assert "two most common branches (3 and 1 of 4 requests)" in found.pair
    assert found.probe is not None and found.probe.op == "gemm" and found.probe.shape == {"M": 36, "K": 64, "N": 64}
    assert found.probe.command == (
        "orchestrator probe --preset cpu_small --arm hooked --out " + str(paths.root) + " --set 'shapes={\"model."
        "layers.0.self_attn.q_proj\": [64, 64]}' --set 'm=[1, 9, 36]' --set 'arms=[\"fp32\"]' --set device=cpu")
    assert found.margin is None  # the same token ids
    assert "first flipped token: none" in render(found)


def test_the_probe_runs_on_the_device_and_dtype_the_engine_named_on_a_gpu(tmp_path: Path) -> None:
    answers = [_answer("conc", "concurrent", 0, r, "A") for r in range(3)]
    answers.append(_answer("conc", "concurrent", 1, 0, "B"))
    digests = _digests("hooked/p/conc/0/0", 4) + _digests("hooked/p/conc/1/0", 1,
                                                           split=(0, "model.layers.0.self_attn.q_proj", "out"))
    started = ("hookedengine version 0.1.0, torch 2.11.0+cu130, transformers 5.17.0, device cuda:0 (NVIDIA H100 80GB "
               "HBM3), dtype bfloat16")
    found = locate(_run(tmp_path, answers, digests, started), "hooked/p/conc")
    assert found.probe is not None and found.probe.note is None and found.probe.preset == "h200_default"
    assert "--set 'arms=[\"bf16\"]' --set device=cuda" in found.probe.command


def test_calls_on_the_batch_s_mixed_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    answers = [_answer("conc", "concurrent", 0, r, "A") for r in range(3)]
    answers.append(_answer("conc", "concurrent", 1, 0, "B"))
    a = _digests("hooked/p/conc/0/0", 4)
    for row in a:  # MoE experts' inputs: the batch's tokens grouped by expert, no rows of the request's own
        if row["module"] == "model.layers.0.self_attn.o_proj":
            row.update(rows_start=None, rows_stop=None, out_hash="grouped", in_hash=None)
    b = _digests("hooked/p/conc/1/0", 1, split=(1, "model.layers.0.mlp.down_proj", "out"))
    found = locate(_run(tmp_path, answers, a + b), "hooked/p/conc")
    diff = found.difference
    assert diff is not None and diff.kind == KERNEL and (diff.step, diff.module) == (1, "model.layers.0.mlp.down_proj")
    assert found.mixed_calls == 2  # o_proj in steps 0 and 1
    assert "2 calls skipped: their rows mix the batch's requests" in render(found)


def test_a_split_between_modules_names_the_parent_and_the_calls_around_it(tmp_path: Path) -> None:
    paths = _branches(tmp_path, (1, "model.layers.0.self_attn.o_proj", "in"))
    found = locate(paths, "hooked/p/conc")
    diff = found.difference
    assert diff is not None and diff.kind == BETWEEN and diff.step == 1
    assert (diff.parent, diff.before, diff.module) == ("model.layers.0.self_attn", "model.layers.0.self_attn.v_proj",
                                                       "model.layers.0.self_attn.o_proj")
    assert headline(found).startswith("first split: step 1 (decode, token 2), inside model.layers.0.self_attn, "
                                      "between v_proj and o_proj (computation that is no module)")
    assert found.probe is not None and found.probe.op == "decode_attention"
    assert found.probe.shape == {"heads": 4, "kv_heads": 2, "head_dim": 16, "context": 10}
    assert found.probe.m == [1, 4] and "--preset ops_cpu_small" in found.probe.command


def test_identical_digests_say_so_with_what_was_compared(tmp_path: Path) -> None:
    answers = [_answer("conc", "concurrent", 0, r, "A") for r in range(2)] + [_answer("seq", "sequential", 0, 0, "A")]
    digests = _digests("hooked/p/conc/0/0", 1) + _digests("hooked/p/conc/0/1", 2) + _digests("hooked/p/seq/0/0", 1)
    found = locate(_run(tmp_path, answers, digests), "hooked/p/conc")
    assert found.difference is None and found.probe is None
    assert found.a.request_id == "hooked/p/conc/0/1" and found.b.request_id == "hooked/p/seq/0/0"  # the larger batch
    assert "against one of phase seq (sequential, batch of 1 in its prefill); one signature, so the first " \
        "sequential phase" in found.pair
    assert headline(found) == f"identical digests: {3 * len(MODULES)} module calls in 3 steps compared, no difference"


def test_other_call_sequences_are_aligned_by_module_name_and_said(tmp_path: Path) -> None:
    paths = _branches(tmp_path, (0, "model.layers.0.mlp.down_proj", "out"), extra="model.layers.0.self_attn.split")
    found = locate(paths, "hooked/p/conc")
    assert found.realigned_steps == [0] and found.one_sided_calls == 1
    assert found.difference is not None and found.difference.module == "model.layers.0.mlp.down_proj"
    assert found.difference.kind == KERNEL
    assert "aligned by module name and occurrence, 1 call on one side only" in render(found)


def test_the_margin_at_the_first_flipped_token(tmp_path: Path) -> None:
    paths = _branches(tmp_path, (0, "lm_head", "out"), token_ids=[5, 6, 9])
    found = locate(paths, "hooked/p/conc")
    assert found.margin is not None and found.margin.position == 2
    assert (found.margin.a.token_id, found.margin.b.token_id) == (7, 9)
    assert found.margin.a.top == [("7", -0.1), ("z", -0.4)] and found.margin.b.gap == pytest.approx(0.3)
    assert "first flipped token: position 2: a took token id 7" in render(found)


def test_a_cell_without_digests_is_one_line_naming_the_switch_and_exit_2(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    answers = [_answer("conc", "concurrent", 0, 0, "A"), _answer("conc", "concurrent", 1, 0, "B")]
    paths = _run(tmp_path, answers, _digests("hooked/p/conc/0/0", 2))  # one branch only
    with pytest.raises(RecordError, match="has no digests for cell hooked/p/conc: run it again with protocol."
                                          r"request.digests=true on an arm with `engine: transformers_hooked`"):
        locate(paths, "hooked/p/conc")
    assert main(["locate", str(paths.root), "--cell", "hooked/p/conc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_bad_cells_are_one_line(tmp_path: Path) -> None:
    paths = _branches(tmp_path, None)
    with pytest.raises(ConfigError, match="give ARM/PROMPT/PHASE"):
        locate(paths, "hooked/p")
    with pytest.raises(ConfigError, match=r"no such cell .*\. Did you mean 'conc'\? Available: conc"):
        locate(paths, "hooked/p/cnoc")
    with pytest.raises(ConfigError, match=r"--against seq: hooked/p has no answers in phase seq \(the arm and "
                                          r"prompt ran in no other phase\)"):
        locate(paths, "hooked/p/conc", "seq")
    alone = _run(tmp_path / "alone", [_answer("conc", "concurrent", 0, 0, "A")], _digests("hooked/p/conc/0/0", 1))
    with pytest.raises(ConfigError, match="has one signature and hooked/p ran in no sequential phase"):
        locate(alone, "hooked/p/conc")


def test_a_typo_in_the_arm_or_prompt_gets_the_closest_name(tmp_path: Path) -> None:
    paths = _branches(tmp_path, None)
    with pytest.raises(ConfigError, match=r"no arm 'hooke' with answers in .*\. Did you mean 'hooked'\? Available: "
                                          "hooked$"):
        locate(paths, "hooke/p/conc")
    with pytest.raises(ConfigError, match=r"no prompt 'pp' with answers in .*\. Did you mean 'p'\?"):
        locate(paths, "hooked/pp/conc")


def test_a_refusal_names_the_phases_against_can_take(tmp_path: Path) -> None:
    answers = [_answer("conc", "concurrent", 0, 0, "A"), _answer("more", "concurrent", 0, 0, "A")]
    paths = _run(tmp_path, answers, _digests("hooked/p/conc/0/0", 2) + _digests("hooked/p/more/0/0", 2))
    with pytest.raises(ConfigError, match=r"ran in no sequential phase to compare it against: pass --against PHASE "
                                          r"\(phases it can take: more\)"):
        locate(paths, "hooked/p/conc")
    assert locate(paths, "hooked/p/conc", "more").b.phase == "more"


def _one_signature(tmp_path: Path) -> RunPaths:
    """A concurrent batch of 4 and two sequential requests, one signature: identical digests."""
    answers = [_answer("conc", "concurrent", 0, r, "A") for r in range(4)]
    answers += [_answer("seq", "sequential", r, 0, "A") for r in range(2)]
    digests = [row for r in range(4) for row in _digests(f"hooked/p/conc/0/{r}", 4)]
    digests += _digests("hooked/p/seq/0/0", 1) + _digests("hooked/p/seq/1/0", 1)
    return _run(tmp_path, answers, digests)


def test_side_b_counts_its_own_branch(tmp_path: Path) -> None:
    found = locate(_one_signature(tmp_path), "hooked/p/conc")
    assert (found.a.requests, found.b.requests) == (4, 2)
    assert "phase seq, sequential, its branch 2 requests" in render(found)


def test_a_sequential_cell_is_compared_with_the_first_phase_that_ran_beside_others(tmp_path: Path) -> None:
    found = locate(_one_signature(tmp_path), "hooked/p/seq")
    assert (found.a.phase, found.b.phase, found.b.requests) == ("seq", "conc", 4)
    assert found.pair == ("a request of the cell (batch of 1 in its prefill) against one of phase conc (concurrent, "
                          "batch of 4 in its prefill); one signature, so the first non-sequential phase")
    assert found.difference is None


def test_m_equal_on_both_sides_is_not_the_gemms_variance_and_gets_no_probe(tmp_path: Path) -> None:
    """The planted module: each request computed alone in a window of 4, its GEMM split by the window's size."""
    answers = [_answer("conc", "concurrent", 0, 0, "A"), _answer("seq", "sequential", 0, 0, "A")]
    digests = _digests("hooked/p/conc/0/0", 4, split=(0, "model.layers.0.mlp.down_proj", "out"), layout="alone")
    paths = _run(tmp_path, answers, digests + _digests("hooked/p/seq/0/0", 1))
    found = locate(paths, "hooked/p/conc")
    assert headline(found) == ("first split: step 0 (prefill), model.layers.0.mlp.down_proj (Linear): input "
                               "identical, output differs; window of 4 vs 1, M 9 vs 9")
    assert found.probe is None and found.no_probe == (
        "M equal on both sides (9 vs 9): not the GEMM's variance with M (what differs is the window: 4 vs 1 "
        "requests); the op probe does not apply")
    assert f"op probe: {found.no_probe}" in render(found).splitlines()
    assert main(["locate", str(paths.root), "--cell", "hooked/p/conc", "--probe"]) == 0  # nothing runs


def test_a_split_in_a_packed_row_says_the_padded_probe_cannot_settle_it(tmp_path: Path) -> None:
    """Continuous batching: the prefill of 3 requests packed in one row [1, 27, H], attention split."""
    answers = [_answer("conc", "concurrent", 0, 0, "A"), _answer("seq", "sequential", 0, 0, "A")]
    digests = _digests("hooked/p/conc/0/0", 3, split=(0, "model.layers.0.self_attn.o_proj", "in"), layout="packed")
    found = locate(_run(tmp_path, answers, digests + _digests("hooked/p/seq/0/0", 1, layout="packed")),
                   "hooked/p/conc")
    assert found.difference is not None and found.difference.kind == BETWEEN
    assert found.difference.a.packed and not found.difference.b.packed
    assert headline(found).endswith("batch 3 vs 1 (packed in one row), M 27 vs 9")
    assert found.probe is not None and found.probe.packed and found.probe.op == "prefill_attention"
    assert found.probe.note is not None and "packed row, so its verdict can neither confirm nor refute" in \
        found.probe.note
    found.verdict = probe_verdict([{"process": 1, "arm": "eager", "M": m, "row0_bits_equal_m1": True,
                                    "unsupported": None} for m in (1, 3)])
    assert render(found).splitlines()[-1].endswith("(padded sequences: this can neither confirm nor refute the "
                                                   "split on a packed row)")


def test_the_report_says_where_inside_for_every_cell_beside_others(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.report.build import build

    paths = _one_signature(tmp_path)
    report = build(Recorded.of([read_run(paths, {"study": "s", "run_id": "r"})]))
    assert [c.label for c in report.comparison.inside] == ["hooked/p/conc"]  # not the sequential cell
    command = f"orchestrator locate {paths.root} --cell hooked/p/conc"
    line = (f"- `hooked/p/conc`: identical digests: {3 * len(MODULES)} module calls in 3 steps compared, no "
            f"difference; details: `{command}`")
    assert "## Where inside the model" in paths.report_md.read_text() and line in paths.report_md.read_text()
    assert "<h2>Where inside the model</h2>" in paths.report_html.read_text()
    assert json.loads(paths.report_json.read_text())["inside"][0]["command"] == command
    assert main(["show", str(paths.root)]) == 0
    assert f"  hooked/p/conc: identical digests: {3 * len(MODULES)} module calls" in capsys.readouterr().out
    assert main(["show", str(paths.root), "--cell", "hooked/p/seq"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"it has one signature; `orchestrator locate {paths.root} --cell hooked/p/seq` compares its digests against "
        "a request of another phase")
    assert main(["show", str(paths.root), "--cell", "hooked/p/conc"]) == 2
    assert capsys.readouterr().err.strip().endswith("compares its digests against a sequential request")


def test_a_run_without_digests_has_no_section(tmp_path: Path) -> None:
    from orchestrator.report.build import build

    paths = _run(tmp_path, [_answer("conc", "concurrent", 0, 0, "A")], [])
    report = build(Recorded.of([read_run(paths, {"study": "s", "run_id": "r"})]))
    assert report.comparison.inside == [] and "inside" not in json.loads(paths.report_json.read_text())
    assert "Where inside the model" not in paths.report_md.read_text() + paths.report_html.read_text()


def test_the_verb_prints_the_answer_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _branches(tmp_path, (0, "model.layers.0.self_attn.q_proj", "out"))
    assert main(["locate", str(paths.root), "--cell", "hooked/p/conc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("first split: step 0 (prefill), model.layers.0.self_attn.q_proj (Linear)")
    assert any(line.strip().startswith("orchestrator probe --preset cpu_small") for line in out)


def test_the_explorer_gets_the_section_from_the_same_result(tmp_path: Path) -> None:
    from orchestrator.analysis.compare import compare
    from orchestrator.report.explorer_html import explored_html
    from orchestrator.report.explorer_md import explored_section, from_json
    from orchestrator.report.explorer_text import render as text

    paths = _branches(tmp_path, (0, "model.layers.0.self_attn.q_proj", "out"))
    explored = compare(paths).explorer
    assert len(explored) == 1 and explored[0].inside is not None
    again = from_json(json.loads(json.dumps(compare(paths).to_json()))["explorer"][0])
    assert again.inside == explored[0].inside and isinstance(again.inside, Located)
    said = headline(explored[0].inside)
    assert f"Where inside the model: {said}" in text(again, terminal=False)
    assert f"**Where inside the model**: {said}" in explored_section(again)
    assert "<strong>Where inside the model</strong>" in explored_html(again, 0)


def test_the_probe_verdict_says_from_which_m_row_0_changed() -> None:
    rows = [{"process": 1, "arm": "fp32", "M": m, "row0_bits_equal_m1": m < 9, "unsupported": None}
            for m in (1, 9, 36)]
    said = probe_verdict(rows)
    assert said.m_variant is True
    assert said.said == "M-variant: row 0 differs from its value at M = 1 for fp32 at M = 9, 36"
    steady = probe_verdict([{**r, "row0_bits_equal_m1": True} for r in rows])
    assert steady.m_variant is False and "row 0 bitwise identical at M = 1, 9, 36" in steady.said
    assert probe_verdict([{"process": 1, "unsupported": "no CUDA"}]).m_variant is None


@pytest.mark.parametrize("split", [(0, "model.layers.0.self_attn.q_proj", "out"),
                                   (1, "model.layers.0.self_attn.o_proj", "in"),
                                   (0, "model.layers.0.input_layernorm", "out")])
def test_the_probe_command_is_one_the_probe_presets_take(tmp_path: Path, split: tuple[int, str, str]) -> None:
    from orchestrator.config.probe import load_probe_config
    from orchestrator.probes.ops import entry_problems

    ask = locate(_branches(tmp_path, split), "hooked/p/conc").probe
    assert ask is not None
    config = load_probe_config(ask.preset, ask.sets)
    spec = config.spec()
    assert spec["m"] == ask.m and spec["device"] == "cpu"
    assert [p for name, entry in (spec.get("ops") or {}).items() for p in entry_problems(name, entry)] == []
