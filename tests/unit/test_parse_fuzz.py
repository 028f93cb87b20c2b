"""vLLM's response formats (fixtures written from its documented shapes) and fuzzing: a malformed body
is recorded as an error, never a crash, and its row always lands in Parquet."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.config.schema import PhaseKind
from orchestrator.engines import profile_for
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter, read_table
from orchestrator.run.send.protocol import Request
from orchestrator.run.send.sender import RunContext, response_row
from orchestrator.run.wire.client import Exchange

parse_completion = profile_for(None).parse  # a body in the default engine's dialect

CHAT = {  # docs/vllm.md, "/v1/chat/completions"
    "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "length",
                 "logprobs": {"content": [
                     {"token": "Par", "logprob": -0.01, "bytes": [80, 97, 114],
                      "top_logprobs": [{"token": "Par", "logprob": -0.01, "bytes": [80, 97, 114]},
                                       {"token": "Ly", "logprob": -4.6, "bytes": [76, 121]}]},
                     {"token": "is", "logprob": -0.2, "bytes": [105, 115],
                      "top_logprobs": [{"token": "is", "logprob": -0.2, "bytes": [105, 115]}]}]}}],
    "prompt_logprobs": [None, {"9": {"logprob": -3.0, "rank": 2, "decoded_token": "x"}}],
    "prompt_token_ids": [1, 9],
    "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
}

ECHO = {  # /v1/completions with echo: the first prompt position is null; -inf is served as -9999.0
    "object": "text_completion", "model": "m",
    "choices": [{"index": 0, "text": "Hi there", "finish_reason": "stop",
                 "logprobs": {"tokens": ["Hi", " there"], "token_logprobs": [None, -9999.0],
                              "top_logprobs": [None, {" there": -9999.0}], "text_offset": [0, 2]}}],
}


def test_chat_completion_fixture() -> None:
    parsed = parse_completion(json.dumps(CHAT).encode())
    assert parsed.error is None and parsed.completion_text == "Paris"
    assert parsed.tokens == ["Par", "is"] and parsed.token_logprobs == [-0.01, -0.2]
    assert parsed.top_logprobs == [[{"token": "Par", "logprob": -0.01}, {"token": "Ly", "logprob": -4.6}],
                                   [{"token": "is", "logprob": -0.2}]]
    assert parsed.prompt_logprobs == [None, [{"token_id": 9, "token": "x", "logprob": -3.0, "rank": 2}]]


def test_echo_fixture_keeps_null_positions() -> None:
    parsed = parse_completion(json.dumps(ECHO).encode())
    assert parsed.error is None and parsed.top_logprobs == [None, [{"token": " there", "logprob": -9999.0}]]
    assert parsed.token_logprobs is not None and parsed.token_logprobs[1] == -9999.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30)


def mutated(base: dict) -> st.SearchStrategy[dict]:
    """The fixture with one nested value replaced by arbitrary JSON."""
    paths: list[list] = []

    def walk(node: object, path: list) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, [*path, key])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, [*path, i])

    walk(base, [])

    def replace(path: list, value: object) -> dict:
        doc = json.loads(json.dumps(base))
        if not path:
            return value  # type: ignore[return-value]
        holder = doc
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value
        return doc

    return st.builds(replace, st.sampled_from(paths[1:]), json_values)


def truncated(base: dict) -> st.SearchStrategy[bytes]:
    """The fixture cut anywhere: a connection closed mid-body."""
    body = json.dumps(base).encode()
    return st.integers(min_value=0, max_value=len(body) - 1).map(lambda n: body[:n])


def huge(positions: int) -> bytes:
    """A valid completion of `positions` tokens with 20 top logprobs each (a long max_tokens answer)."""
    top = [{"token": f"t{i}", "logprob": -i / 7, "bytes": [116]} for i in range(20)]
    content = [{"token": "t0", "logprob": 0.0, "bytes": [116], "top_logprobs": top} for _ in range(positions)]
    doc = json.loads(json.dumps(CHAT))
    doc["choices"][0]["logprobs"]["content"] = content
    doc["choices"][0]["message"]["content"] = "t0" * positions
    return json.dumps(doc).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode()),
                 mutated(CHAT).map(lambda d: json.dumps(d).encode()),
                 mutated(ECHO).map(lambda d: json.dumps(d).encode()),
                 truncated(CHAT), truncated(ECHO), st.binary(min_size=1 << 16, max_size=1 << 17)))
def test_any_body_parses_or_says_why(body: bytes) -> None:
    parsed = parse_completion(body)  # never raises
    if parsed.error is not None:
        assert parsed.error.strip(), "an error names what was wrong"
        return
    # A body that parsed is internally consistent: the record's per-token columns line up.
    assert isinstance(parsed.completion_text, str)
    lengths = {len(v) for v in (parsed.tokens, parsed.token_logprobs, parsed.top_logprobs) if v is not None}
    assert len(lengths) <= 1, f"per-token columns of different lengths: {lengths}"
    assert all(isinstance(x, float) for x in parsed.token_logprobs or [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(st.one_of(mutated(CHAT), mutated(ECHO)).map(lambda d: json.dumps(d).encode()), min_size=1, max_size=5))
def test_rows_of_malformed_bodies_always_land(tmp_path_factory, bodies: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    paths = RunPaths(Path(tmp_path_factory.mktemp("fuzz"))).make()
    ctx = RunContext("s", "r", "a", 12)
    with TableWriter(paths, "responses", "a") as writer:
        for i, body in enumerate(bodies):
            request = Request("p", "seq", PhaseKind.sequential, 0, i, i, {"prompt": "x"},
                              role="cold" if i == 0 else "measured")
            writer.append(response_row(ctx, request, Exchange(200, body, None, 1, 2), "x"))
    table = read_table(paths, "responses")
    assert table.column("response_body").to_pylist() == bodies  # exact bytes, every row


def test_a_huge_body_parses_whole() -> None:
    parsed = parse_completion(huge(20_000))
    assert parsed.error is None and parsed.tokens is not None and len(parsed.tokens) == 20_000
    assert parsed.top_logprobs is not None and len(parsed.top_logprobs[-1]) == 20
