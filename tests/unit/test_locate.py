"""`orchestrator locate` on synthetic records: a run dir with answers and digest rows written through the record's
writers (a small attention-and-MLP model's leaf calls, per step), and the first split it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.locate import locate
from orchestrator.analysis.locate_results import BETWEEN, KERNEL, Located
from orchestrator.cli import main
from orchestrator.errors import ConfigError, RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter
from orchestrator.report.locate import headline, render
from orchestrator.run.locate_verb import verdict

PROMPT_TOKENS = 9
HIDDEN, HEAD_DIM, KV = 64, 16, 32
# (module, type, out width): one layer's leaf calls in forward order
MODULES = [("model.embed_tokens", "Embedding", HIDDEN), ("model.rotary_emb", "LlamaRotaryEmbedding", HEAD_DIM),
           ("model.layers.0.input_layernorm", "LlamaRMSNorm", HIDDEN),
           ("model.layers.0.self_attn.q_proj", "Linear", HIDDEN), ("model.layers.0.self_attn.k_proj", "Linear", KV),
           ("model.layers.0.self_attn.v_proj", "Linear", KV), ("model.layers.0.self_attn.o_proj", "Linear", HIDDEN),
           ("model.layers.0.mlp.down_proj", "Linear", HIDDEN), ("lm_head", "Linear", 128)]


def _digests(request_id: str, batch: int, steps: int = 3, split: tuple[int, str, str] | None = None,
             extra: str | None = None) -> list[dict[str, Any]]:
    """Every call's rows; from `split` (step, module, "in" or "out") on, hashes differ (so do later inputs);
    `extra`: a module called a second time in step 0 (another split of the same work)."""
    rows, changed = [], False
    for step in range(steps):
        length = PROMPT_TOKENS if step == 0 else 1
        modules = [*MODULES[:4], (extra, "Linear", HIDDEN), *MODULES[4:]] if extra and step == 0 else MODULES
        for call, (module, kind, width) in enumerate(modules):
            in_changed = changed or split == (step, module, "in")
            changed = in_changed or split == (step, module, "out")
            tag = "x" if changed else ""
            rows.append({
                "study": "s", "run_id": "r", "arm": "hooked", "request_id": request_id, "attempt": 0,
                "engine_request_id": f"cmpl-{request_id}", "step": step, "call": call, "module": module,
                "module_type": kind, "rows_start": 0, "rows_stop": length, "rows_total": batch * length,
                "in_shape": [batch, length, HIDDEN], "out_shape": [batch, length, width],
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


def _run(tmp_path: Path, answers: list[dict[str, Any]], digests: list[dict[str, Any]]) -> RunPaths:
    paths = RunPaths(tmp_path / "run").make()
    paths.meta.write_text(json.dumps({"study": "s", "run_id": "r"}))
    for table, rows in (("responses", answers), ("digests", digests)):
        with TableWriter(paths, table, "hooked") as writer:
            for row in rows:
                writer.append(row)
    with TableWriter(paths, "logs", "hooked") as writer:
        writer.append({"run_id": "r", "arm": "hooked", "stream": "stderr", "seq": 0,
                       "text": "hookedengine version 0.1, torch 2.13, transformers 5.25, device cpu, dtype float32"})
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
    assert "against one of phase seq (sequential); one signature" in found.pair
    assert headline(found) == f"identical digests: {3 * len(MODULES)} module calls in 3 steps compared, no difference"


def test_other_call_sequences_are_aligned_by_module_name_and_said(tmp_path: Path) -> None:
    paths = _branches(tmp_path, (0, "model.layers.0.mlp.down_proj", "out"), extra="model.layers.0.self_attn.split")
    found = locate(paths, "hooked/p/conc")
    assert found.realigned_steps == [0] and found.one_sided_calls == 1
    assert found.difference is not None and found.difference.module == "model.layers.0.mlp.down_proj"
    assert found.difference.kind == KERNEL
    assert "aligned by module name and occurrence, 1 calls on one side only" in render(found)


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
    with pytest.raises(ConfigError, match=r"no such cell .* \(phases of hooked/p: conc\)"):
        locate(paths, "hooked/p/nope")
    with pytest.raises(ConfigError, match=r"--against seq: hooked/p has no answers in phase seq \(phases: conc\)"):
        locate(paths, "hooked/p/conc", "seq")
    alone = _run(tmp_path / "alone", [_answer("conc", "concurrent", 0, 0, "A")], _digests("hooked/p/conc/0/0", 1))
    with pytest.raises(ConfigError, match="has one signature and hooked/p ran in no other sequential phase"):
        locate(alone, "hooked/p/conc")


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
    said = verdict(rows)
    assert said.m_variant is True and said.said == "M-variant: row 0 changes with M: fp32 from M = 9 (at 9, 36)"
    steady = verdict([{**r, "row0_bits_equal_m1": True} for r in rows])
    assert steady.m_variant is False and "row 0 bitwise identical at M = 1, 9, 36" in steady.said
    assert verdict([{"process": 1, "unsupported": "no CUDA"}]).m_variant is None


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
