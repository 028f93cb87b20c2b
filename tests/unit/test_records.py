"""Parsing, signatures, the Parquet store and the statistics, on hand-built inputs with known answers."""

from __future__ import annotations

import json
import math

import pytest

from orchestrator.analysis import signatures
from orchestrator.analysis.stats import clopper_pearson, divergence_bound, upper_bound_zero
from orchestrator.engines import profile_for
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter, read_table

parse_completion = profile_for(None).parse  # a body in the default engine's dialect

VLLM_BODY = {
    "id": "cmpl-1", "object": "text_completion", "model": "m",
    "choices": [{"index": 0, "text": " Paris", "finish_reason": "length", "stop_reason": None,
                 "logprobs": {"tokens": [" Par", "is"], "token_logprobs": [-0.25, -1e-05],
                              "top_logprobs": [{" Par": -0.25, " Lyon": -1.5}, {"is": -1e-05, "ish": -12.0}],
                              "text_offset": [0, 4]},
                 "prompt_logprobs": [None, {"1234": {"logprob": -2.1, "rank": 3, "decoded_token": "Hi"}}],
                 "token_ids": [11, 12]}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
}


def test_parse_vllm_completion() -> None:
    parsed = parse_completion(json.dumps(VLLM_BODY).encode())
    assert parsed.error is None
    assert parsed.completion_text == " Paris" and parsed.token_ids == [11, 12]
    assert parsed.top_logprobs == [[{"token": " Par", "logprob": -0.25}, {"token": " Lyon", "logprob": -1.5}],
                                   [{"token": "is", "logprob": -1e-05}, {"token": "ish", "logprob": -12.0}]]
    assert parsed.prompt_logprobs == [None, [{"token_id": 1234, "token": "Hi", "logprob": -2.1, "rank": 3}]]
    assert parsed.prompt_tokens == 2


def test_token_ids_from_return_tokens_as_token_ids() -> None:
    body = json.loads(json.dumps(VLLM_BODY))
    del body["choices"][0]["token_ids"]
    body["choices"][0]["logprobs"]["tokens"] = ["token_id:7", "token_id:8"]
    assert parse_completion(json.dumps(body).encode()).token_ids == [7, 8]


@pytest.mark.parametrize(("body", "problem"), [
    (b"<html>502 Bad Gateway</html>", "not JSON"),
    (b"[]", "not an object"),
    (b'{"error": {"message": "boom", "code": 500}}', "server error: boom"),
    (b'{"choices": []}', "no choices"),
    (b'{"choices": [{"text": "x", "logprobs": {"top_logprobs": [{"a": "nan?"}]}}]}', "logprobs malformed"),
])
def test_malformed_bodies_are_errors_not_crashes(body: bytes, problem: str) -> None:
    assert problem in (parse_completion(body).error or "")


def test_top_logprob_signature_precision() -> None:
    a = [[{"token": "x", "logprob": -0.1234567890123}]]
    b = [[{"token": "x", "logprob": -0.1234567890124}]]  # differs in the 13th significant digit
    c = [[{"token": "x", "logprob": -0.12345678902}]]  # differs in the 11th
    assert signatures.top_logprobs_signature(a) == signatures.top_logprobs_signature(b)
    assert signatures.top_logprobs_signature(a) != signatures.top_logprobs_signature(c)
    assert signatures.top_logprobs_signature(a, 14) != signatures.top_logprobs_signature(b, 14)
    assert signatures.top_logprobs_signature(None) is None  # not possible, never "equal"


def test_store_roundtrip_is_atomic_and_exact(tmp_path) -> None:  # type: ignore[no-untyped-def]
    paths = RunPaths(tmp_path).make()
    raw = b'{"weird": "\xff bytes kept"}'
    with TableWriter(paths, "logs", "arm-a", flush_rows=2) as writer:
        for seq in range(5):
            writer.append({"run_id": "r", "arm": "a", "container_id": "c", "stream": "stdout", "seq": seq,
                           "timestamp": "t", "text": f"line {seq}"})
    files = sorted(p.name for p in paths.table("logs").iterdir())
    assert files == ["arm-a-00000.parquet", "arm-a-00001.parquet", "arm-a-00002.parquet"]
    assert read_table(paths, "logs").column("seq").to_pylist() == [0, 1, 2, 3, 4]
    with TableWriter(paths, "responses", "a") as writer:
        writer.append({"arm": "a", "response_body": raw, "top_logprobs": [[{"token": "t", "logprob": -1.0}]]})
    table = read_table(paths, "responses")
    assert table.column("response_body").to_pylist() == [raw]
    import pyarrow.parquet as pq

    meta = pq.read_schema(next(paths.table("responses").glob("*.parquet"))).metadata
    assert meta[b"orchestrator.schema_version"] == b"10"


def test_writer_continues_numbering_after_existing_parts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    paths = RunPaths(tmp_path).make()
    for _ in range(2):
        with TableWriter(paths, "arms", "arms") as writer:
            writer.append({"arm": "a"})
    assert read_table(paths, "arms").num_rows == 2


def test_two_names_that_sanitize_alike_never_share_part_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Arms `a.b` and `a_b` writing at once: before, both wrote a_b-00000.parquet, and one replaced the other."""
    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "arms", "a.b") as dotted, TableWriter(paths, "arms", "a_b") as plain:
        dotted.append({"arm": "a.b"})
        plain.append({"arm": "a_b"})
    assert sorted(read_table(paths, "arms").column("arm").to_pylist()) == ["a.b", "a_b"]
    assert len(list(paths.table("arms").glob("*.parquet"))) == 2


def test_bounds_known_values() -> None:
    assert upper_bound_zero(30) == pytest.approx(0.0950, abs=5e-5)
    assert upper_bound_zero(1080) == pytest.approx(0.00277, abs=5e-6)
    lo, hi = clopper_pearson(3, 30)
    assert lo == pytest.approx(0.0211, abs=1e-4) and hi == pytest.approx(0.2653, abs=1e-4)
    assert divergence_bound(0, 6) == (0.0, pytest.approx(1 - 0.05 ** (1 / 6)))
    assert divergence_bound(6, 6)[1] == 1.0
    assert not math.isnan(clopper_pearson(500, 1000)[0])


def test_a_previous_version_part_is_read_and_later_attempts_supersede_earlier_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator.record.schemas import RESPONSES
    from orchestrator.record.tables import iter_batches

    paths = RunPaths(tmp_path).make()
    v1 = pa.schema([f for f in RESPONSES if f.name not in ("request_id", "attempt", "role")])
    pq.write_table(pa.Table.from_pylist([{"arm": "a", "prompt_id": "p"}], schema=v1),
                   paths.table("responses") / "old-00000.parquet")  # schema version 1: no request_id
    with TableWriter(paths, "responses", "a") as writer:
        for attempt, error in ((0, "not sent"), (1, None)):
            writer.append({"arm": "a", "prompt_id": "q", "request_id": "a/q/s/0/0", "attempt": attempt,
                           "error": error})
    rows = sorted(read_table(paths, "responses", ["prompt_id", "attempt", "error"]).to_pylist(),
                  key=lambda r: r["prompt_id"])
    assert rows == [{"prompt_id": "p", "attempt": None, "error": None}, {"prompt_id": "q", "attempt": 1, "error": None}]
    streamed = [r for b in iter_batches(paths, "responses", ["prompt_id", "error"]) for r in b.to_pylist()]
    assert sorted(streamed, key=lambda r: r["prompt_id"]) == [{"prompt_id": "p", "error": None},
                                                               {"prompt_id": "q", "error": None}]


def test_a_column_read_dictionary_encoded_is_of_one_type_in_every_part(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator.record.tables import iter_batches

    paths = RunPaths(tmp_path).make()
    pq.write_table(pa.table({"arm": ["a"]}), paths.table("responses") / "old-00000.parquet")  # no tokens column
    with TableWriter(paths, "responses", "a") as writer:
        writer.append({"arm": "a", "tokens": ["x", "y"]})
    batches = list(iter_batches(paths, "responses", ["tokens"], dictionary=("tokens",)))
    assert {b.schema.field("tokens").type for b in batches} == {pa.list_(pa.dictionary(pa.int32(), pa.string()))}
    assert [r["tokens"] for b in batches for r in b.to_pylist()] == [["x", "y"], None]


def test_a_part_without_statistics_is_read_for_its_attempts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator.record.schemas import RESPONSES
    from orchestrator.record.tables import iter_batches

    paths = RunPaths(tmp_path).make()
    sent = (("p", "x", 0), ("q", "x", 1), ("s", "y", 0))
    rows = [{"prompt_id": p, "request_id": r, "attempt": a} for p, r, a in sent]
    pq.write_table(pa.Table.from_pylist(rows, schema=RESPONSES), paths.table("responses") / "r-00000.parquet",
                   write_statistics=False)  # the footer cannot say whether anything was re-sent
    streamed = [r["prompt_id"] for b in iter_batches(paths, "responses", ["prompt_id"]) for r in b.to_pylist()]
    assert streamed == ["q", "s"]


def test_a_stand_in_column_is_read_only_where_the_column_it_stands_in_for_has_a_null(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.record.tables import iter_batches

    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "responses", "a", flush_rows=2) as writer:  # parts of two rows
        for ids, tokens in (([1], ["x"]), ([2], ["y"]), (None, ["z"]), ([3], ["w"])):
            writer.append({"arm": "a", "token_ids": ids, "tokens": tokens})
    rows = [r for b in iter_batches(paths, "responses", ["token_ids", "tokens"], stand_in={"tokens": "token_ids"})
            for r in b.to_pylist()]
    assert [r["tokens"] for r in rows] == [None, None, ["z"], ["w"]]  # the second part has a row without ids


@pytest.mark.parametrize("reader", ["read_table", "iter_batches"])
def test_a_part_from_a_newer_schema_is_refused_naming_the_file(tmp_path, reader: str) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestrator.errors import RecordError
    from orchestrator.record.schemas import RESPONSES, SCHEMA_VERSION
    from orchestrator.record.tables import iter_batches

    paths = RunPaths(tmp_path).make()
    with TableWriter(paths, "responses", "a") as writer:
        writer.append({"arm": "a", "prompt_id": "p"})
    newer = RESPONSES.with_metadata({"orchestrator.schema_version": str(int(SCHEMA_VERSION) + 1)})
    part = paths.table("responses") / "b-00000.parquet"
    pq.write_table(pa.Table.from_pylist([{"arm": "b"}], schema=newer), part)
    with pytest.raises(RecordError, match=f"{part.name} was written with record schema {int(SCHEMA_VERSION) + 1}.*"
                                          f"reads schemas 1 to {SCHEMA_VERSION}"):
        if reader == "read_table":
            read_table(paths, "responses", ["arm"])
        else:
            list(iter_batches(paths, "responses", ["arm"]))
