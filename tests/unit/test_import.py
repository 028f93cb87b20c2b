"""`orchestrator import` (imports/, docs/import.md) on the committed samples, each made by the real tool against
the reference engine (scripts/import-samples.sh): detLLM's own `check` (its repro packs, fused finalize off and on,
tiers 1 and 2) and curl's saved answers. The run dir then reads as any other: compare's cells, the provenance line,
the source kept verbatim. A malformed source is one line, exit 2."""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.imports.evidence import digest
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "import"


def _import(capsys: pytest.CaptureFixture[str], source: Path, out: Path, *extra: str) -> tuple[int, str]:
    status = cli.main(["import", str(source), "--out", str(out), *extra])
    return status, capsys.readouterr().err


def _cells(out: Path) -> dict[tuple[str, str], tuple[int, int | None, str]]:
    report = json.loads((out / "report.json").read_text())
    return {(c["arm"], c["prompt_id"]): (c["n"], c["distinct_signatures"], c["signature_basis"])
            for c in report["cells"]}


def test_a_detllm_repro_pack_becomes_a_run_dir_with_its_provenance(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    source = SAMPLES / "detllm" / "fused_on_tier2"
    status, err = _import(capsys, source, tmp_path / "run")
    assert status == 0, err
    meta = json.loads((tmp_path / "run" / "run.json").read_text())["imported"]
    assert (meta["tool"], meta["version"], meta["kind"]) == ("detLLM", "0.1.1", "detllm")
    assert meta["sha256"] == digest(source) and meta["source"] == str(source)
    kept = tmp_path / "run" / meta["kept"]
    assert not filecmp.dircmp(source, kept).diff_files and (kept / "traces" / "run_4.jsonl").is_file()
    assert "Imported from detLLM 0.1.1: no top-k logprobs (tier 2: the chosen token's only)" in err
    assert "detLLM's verdict: FAIL SCORE_VARIANCE" in err
    # detLLM's scores differ from run to run under the fused finalize: 5 runs, 5 signatures per prompt
    assert {c: v for c, v in _cells(tmp_path / "run").items() if c[0] == "detllm"} == {
        ("detllm", "90b7b16408b9"): (5, 5, "top_logprobs"), ("detllm", "bbaff4d2ecd5"): (5, 5, "top_logprobs")}
    page = (tmp_path / "run" / "report.md").read_text()
    assert "Imported from detLLM 0.1.1" in page and "imported:detllm = not recorded" in page
    assert "orchestrator run --from" not in page and "orchestrator reproduce" not in page  # nothing to re-run
    rows = read_table(RunPaths(tmp_path / "run"), "responses")
    assert rows.num_rows == 12 and set(rows.column("arm").to_pylist()) == {"detllm", "batch_4"}


@pytest.mark.parametrize(("pack", "distinct", "basis"), [("fused_off_tier2", 1, "top_logprobs"),
                                                        ("fused_on_tier1", 1, "token_ids")])
def test_a_repeatable_pack_has_one_signature_per_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str], pack: str,
                                                      distinct: int, basis: str) -> None:
    status, err = _import(capsys, SAMPLES / "detllm" / pack, tmp_path / "run")
    assert status == 0, err
    assert {v for v in _cells(tmp_path / "run").values()} == {(5, distinct, basis), (1, distinct, basis)}


def test_one_detllm_trace_file_is_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _import(capsys, SAMPLES / "detllm" / "fused_off_tier1" / "traces" / "run_0.jsonl", tmp_path / "run")
    assert status == 0, err
    assert set(_cells(tmp_path / "run").values()) == {(1, 1, "token_ids")}


def test_openai_answers_are_grouped_by_the_requests_beside_them(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _import(capsys, SAMPLES / "openai" / "completions", tmp_path / "run")
    assert status == 0, err
    assert "grouped by the requests beside them" in err and "no token ids" in err
    prompts = json.loads((tmp_path / "run" / "prompts.json").read_text())
    assert {p["text"] for p in prompts.values()} == {"The capital of France is", "Count from one to ten: one, two,"}
    # the engine had the fused finalize on: its top-5 logprobs differ in each of 3 answers
    assert set(_cells(tmp_path / "run").values()) == {(3, 3, "top_logprobs")}


def test_chat_answers_are_grouped_by_their_messages_and_compared_on_their_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`transformers serve`'s chat answers (scripts/import-samples.sh): no logprobs, no token ids; the request's
    messages are the prompt (their JSON), the model the answers name the arm, and the text is what cells compare."""
    status, err = _import(capsys, SAMPLES / "openai" / "chat", tmp_path / "run")
    assert status == 0, err
    prompts = json.loads((tmp_path / "run" / "prompts.json").read_text())  # the messages, exactly as sent
    assert {p["text"] for p in prompts.values()} == {json.dumps([{"content": text, "role": "user"}]) for text in
                                                     ("The capital of France is", "Count from one to ten: one, two,")}
    cells = _cells(tmp_path / "run")
    assert {arm for arm, _ in cells} == {"/root/.cache/orchestrator/models/tiny-llama"}
    assert {(n, basis) for n, _distinct, basis in cells.values()} == {(3, "text")}
    texts = read_table(RunPaths(tmp_path / "run"), "responses").column("completion_text").to_pylist()
    assert len(texts) == 6 and all(texts)


def test_openai_answers_without_requests_are_grouped_by_their_prompt_token_ids(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _import(capsys, SAMPLES / "openai" / "token_ids", tmp_path / "run")
    assert status == 0, err
    assert "no request bodies" in err
    assert len(_cells(tmp_path / "run")) == 2 and {v[0] for v in _cells(tmp_path / "run").values()} == {3}


def test_a_map_names_the_prompts_of_answers_saved_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "answers"
    answers.mkdir()
    for path in (SAMPLES / "openai" / "completions").glob("p*_r?.json"):
        shutil.copy(path, answers / path.name)
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({p.name: p.name[:2] for p in answers.glob("*.json")}))
    status, err = _import(capsys, answers, tmp_path / "run", "--prompts", str(mapping), "--arm", "mine")
    assert status == 0, err
    assert set(_cells(tmp_path / "run")) == {("mine", "p0"), ("mine", "p1")}


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_position_parity_evidence_keeps_its_prompt_positions(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            mode: str) -> None:
    """ZC502's collector against an engine whose indexer budget (16 keys) the 51-token prompt exceeds, random ties:
    the forced tokens' logprobs agree up to the budget and spread after it."""
    status, err = _import(capsys, SAMPLES / "parity" / f"{mode}.json", tmp_path / "run")
    assert status == 0, err
    assert "Imported from vllm-position-parity 0.1.1: no completion text, no generated-token logprobs" in err
    [cell] = json.loads((tmp_path / "run" / "report.json").read_text())["cells"]
    assert (cell["arm"], cell["phase"], cell["n"], cell["signature_basis"]) == ("budget16", mode, 4, "token_ids")
    assert cell["first_prompt_position_with_spread"] == 17 and cell["max_prompt_spread"] > 0.1


def _newer_parity(tmp: Path) -> Path:
    doc = json.loads((SAMPLES / "parity" / "sequential.json").read_text())
    (tmp / "p.json").write_text(json.dumps({**doc, "schema_version": "0.2"}))
    return tmp / "p.json"


def _parity_without_positions(tmp: Path) -> Path:
    doc = json.loads((SAMPLES / "parity" / "sequential.json").read_text())
    del doc["samples"][1]["positions"]
    (tmp / "p.json").write_text(json.dumps(doc))
    return tmp / "p.json"


def _malformed_trace(tmp: Path) -> Path:
    pack = tmp / "pack"
    shutil.copytree(SAMPLES / "detllm" / "fused_off_tier1", pack)
    trace = pack / "traces" / "run_2.jsonl"
    trace.write_bytes(trace.read_bytes().replace(b'"generated_token_ids": [', b'"generated_token_ids": ["x", ', 1))
    return pack


def _alone(tmp: Path) -> Path:
    answers = tmp / "alone"
    answers.mkdir()
    shutil.copy(SAMPLES / "openai" / "completions" / "p0_r0.json", answers / "a.json")
    return answers


def _not_json(tmp: Path) -> Path:
    answers = tmp / "broken"
    answers.mkdir()
    (answers / "a.json").write_text('{"choices": [')
    return answers


@pytest.mark.parametrize(("make", "said"), [
    (_malformed_trace, "run_2.jsonl:1: not a detLLM trace row: generated_token_ids missing or of the wrong type"),
    (_alone, "a.json: its prompt is unknown (no request beside it, no prompt or prompt_token_ids in it); save the "
             "request body beside it as NAME.request.json, or pass --prompts MAP.json"),
    (_not_json, "a.json: not JSON ("),
    (_newer_parity, "p.json: schema_version '0.2', this reader knows '0.1'"),
    (_parity_without_positions, "p.json: samples[1]: malformed (KeyError: 'positions')"),
])
def test_a_malformed_source_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    make: object, said: str) -> None:
    source = make(tmp_path)  # type: ignore[operator]
    status, err = _import(capsys, source, tmp_path / "run")
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and said in err, err
    assert not (tmp_path / "run").exists()


def test_an_existing_run_dir_is_not_written_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    status, err = _import(capsys, SAMPLES / "openai" / "completions", tmp_path / "run")
    assert status == 2 and "exists and is not empty" in err and (tmp_path / "run" / "run.json").read_text() == "{}"


def test_a_source_of_no_known_kind_names_the_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    status, err = _import(capsys, tmp_path / "notes.txt", tmp_path / "run")
    assert status == 2 and "name it with --kind (detllm, openai-json, position-parity)" in err
