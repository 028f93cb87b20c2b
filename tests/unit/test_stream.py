"""Streamed answers: SseReader reads server-sent events however the bytes are split, and a stream parses as
the unstreamed body of the same endpoint would (engines/stream.py, EngineProfile.parse)."""

from __future__ import annotations

import dataclasses
import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engines import reference, transformers_serve, vllm
from orchestrator.engines.stream import SseReader, assembled, is_sse

# vLLM 0.32's /v1/completions stream with logprobs 2, return_token_ids, return_tokens_as_token_ids and
# stream_options.include_usage (entrypoints/openai/completion/serving.py's layout): the text "Hi!" of 3 tokens.
VLLM_COMPLETION_EVENTS = [
    {"id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m", "choices": [
        {"index": 0, "text": "H", "logprobs": {"text_offset": [0], "token_logprobs": [-0.5],
                                               "tokens": ["token_id:39"],
                                               "top_logprobs": [{"token_id:39": -0.5, "token_id:40": -1.5}]},
         "finish_reason": None, "stop_reason": None, "prompt_token_ids": [1, 2], "token_ids": [39]}]},
    {"id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m", "choices": [
        {"index": 0, "text": "i", "logprobs": {"text_offset": [11], "token_logprobs": [-0.25],
                                               "tokens": ["token_id:72"],
                                               "top_logprobs": [{"token_id:72": -0.25, "token_id:5": -2.0}]},
         "finish_reason": None, "stop_reason": None, "token_ids": [72]}]},
    {"id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m", "choices": [
        {"index": 0, "text": "!", "logprobs": {"text_offset": [22], "token_logprobs": [-1.0],
                                               "tokens": ["token_id:0"],
                                               "top_logprobs": [{"token_id:0": -1.0, "token_id:9": -1.25}]},
         "finish_reason": "length", "stop_reason": None, "token_ids": [0]}]},
    {"id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}},
]
# The same answer unstreamed.
VLLM_COMPLETION_BODY = {
    "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m",
    "choices": [{"index": 0, "text": "Hi!", "logprobs": {
        "text_offset": [0, 11, 22], "token_logprobs": [-0.5, -0.25, -1.0],
        "tokens": ["token_id:39", "token_id:72", "token_id:0"],
        "top_logprobs": [{"token_id:39": -0.5, "token_id:40": -1.5}, {"token_id:72": -0.25, "token_id:5": -2.0},
                         {"token_id:0": -1.0, "token_id:9": -1.25}]},
        "finish_reason": "length", "stop_reason": None, "prompt_token_ids": [1, 2], "token_ids": [39, 72, 0]}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
}

# vLLM's /v1/chat/completions stream (chat_completion/serving.py): a role event with prompt_token_ids at the
# top, content events with logprobs.content, the finish on the last content event, the usage event.
VLLM_CHAT_EVENTS = [
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "prompt_token_ids": [1, 2],
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [
        {"index": 0, "delta": {"content": "Hé"}, "logprobs": {"content": [
            {"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169],
             "top_logprobs": [{"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169]}]}]},
         "finish_reason": None, "token_ids": [10]}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [
        {"index": 0, "delta": {"content": "llo"}, "logprobs": {"content": [
            {"token": "llo", "logprob": -0.75, "bytes": [108, 108, 111],
             "top_logprobs": [{"token": "llo", "logprob": -0.75, "bytes": [108, 108, 111]}]}]},
         "finish_reason": "stop", "stop_reason": None, "token_ids": [11]}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}},
]
VLLM_CHAT_BODY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m", "prompt_token_ids": [1, 2],
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Héllo"}, "logprobs": {"content": [
        {"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169],
         "top_logprobs": [{"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169]}]},
        {"token": "llo", "logprob": -0.75, "bytes": [108, 108, 111],
         "top_logprobs": [{"token": "llo", "logprob": -0.75, "bytes": [108, 108, 111]}]}]},
        "finish_reason": "stop", "stop_reason": None, "token_ids": [10, 11]}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
}

# transformers serve 5.25 (cli/serving/chat_completion.py): several events in one write, a last event with
# only the finish reason, the usage event, and no `data: [DONE]`; no logprobs.
TRANSFORMERS_CHAT = (
    b'data: {"id":"req_1","choices":[{"delta":{"role":"assistant"},"index":0}],"created":7,"model":"m",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"id":"req_1","choices":[{"delta":{"content":"Hi"},"index":0}],"created":7,"model":"m",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"id":"req_1","choices":[{"delta":{"content":" there"},"index":0}],"created":7,"model":"m",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"id":"req_1","choices":[{"delta":{},"finish_reason":"length","index":0}],"created":7,"model":"m",'
    b'"object":"chat.completion.chunk"}\n\n'
    b'data: {"id":"req_1","choices":[],"created":7,"model":"m","object":"chat.completion.chunk",'
    b'"usage":{"completion_tokens":2,"prompt_tokens":5,"total_tokens":7}}\n\n'
)


def _sse(events: list[dict], *, done: bool = True, newline: bytes = b"\n") -> bytes:
    raw = b"".join(b"data: " + json.dumps(e).encode() + newline * 2 for e in events)
    return raw + (b"data: [DONE]" + newline * 2 if done else b"")


def _same_parse(profile, streamed: bytes, body: dict) -> None:
    got, want = profile.parse(streamed), profile.parse(json.dumps(body).encode())
    assert not got.problems and not want.problems
    assert dataclasses.asdict(got) == dataclasses.asdict(want)


def test_a_vllm_completion_stream_parses_as_its_unstreamed_body() -> None:
    _same_parse(vllm.PROFILE, _sse(VLLM_COMPLETION_EVENTS), VLLM_COMPLETION_BODY)
    parsed = vllm.PROFILE.parse(_sse(VLLM_COMPLETION_EVENTS))
    assert parsed.completion_text == "Hi!" and parsed.token_ids == [39, 72, 0] and parsed.completion_tokens == 3


def test_the_token_id_trick_reads_ids_from_streamed_token_names() -> None:
    """A vLLM before 0.10.2 sends no token_ids: its dialect takes them from "token_id:<id>" names."""
    events = [{**e, "choices": [{k: v for k, v in c.items() if k != "token_ids"} for c in e["choices"]]}
              for e in VLLM_COMPLETION_EVENTS]
    assert vllm.PROFILE.parse(_sse(events)).token_ids == [39, 72, 0]


def test_a_vllm_chat_stream_parses_as_its_unstreamed_body() -> None:
    _same_parse(vllm.PROFILE, _sse(VLLM_CHAT_EVENTS), VLLM_CHAT_BODY)
    whole = json.loads(assembled(_sse(VLLM_CHAT_EVENTS)))
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"] == "Héllo"


def test_a_transformers_serve_chat_stream_with_no_done() -> None:
    parsed = transformers_serve.PROFILE.parse(TRANSFORMERS_CHAT)
    assert parsed.problems == []
    assert (parsed.completion_text, parsed.finish_reason, parsed.completion_tokens) == ("Hi there", "length", 2)
    assert parsed.tokens is None  # it streams no logprobs


def test_the_reference_engines_trace_on_the_last_event_is_read() -> None:
    events = [dict(e) for e in VLLM_COMPLETION_EVENTS]
    events[2] = {**events[2], "engine_trace": {"arrival_ns": 5, "first_step": 3, "last_step": 6}}
    parsed = reference.PROFILE.parse(_sse(events))
    assert (parsed.server_arrival_ns, parsed.server_steps) == (5, (3, 6))


def test_crlf_comments_and_multiline_data() -> None:
    raw = b": keep-alive\r\n\r\n" + _sse(VLLM_COMPLETION_EVENTS, newline=b"\r\n")
    _same_parse(vllm.PROFILE, raw, VLLM_COMPLETION_BODY)
    split = b'data: {"choices": [{"index": 0,\ndata: "text": "x", "finish_reason": "stop"}]}\n\n'
    assert vllm.PROFILE.parse(split).completion_text == "x"


def test_is_sse() -> None:
    assert is_sse(b"\n data: {}") and is_sse(b": comment\n") and is_sse(_sse(VLLM_CHAT_EVENTS))
    assert not is_sse(json.dumps(VLLM_CHAT_BODY).encode()) and not is_sse(b"")


def test_an_error_event_is_the_servers_error() -> None:
    raw = _sse(VLLM_COMPLETION_EVENTS[:1], done=False) + b'data: {"error": {"message": "boom", "code": 500}}\n\n'
    assert vllm.PROFILE.parse(raw).problems == ["server error: boom"]
    assert transformers_serve.PROFILE.parse(b'data: {"error": "out of memory"}\n\n').problems == [
        "server error: out of memory"]


def test_a_truncated_stream_says_so() -> None:
    raw = _sse(VLLM_COMPLETION_EVENTS)
    cut = raw[: raw.index(b"data:", 10) - 1]  # the first event, without its blank line: still whole JSON
    parsed = vllm.PROFILE.parse(cut)
    assert parsed.completion_text == "H" and parsed.problems == ["stream ended before a finish_reason (truncated)"]
    mid = vllm.PROFILE.parse(raw[: raw.index(b"data:", 10) + 100])
    assert mid.problems[0].startswith("event 1 is not JSON")
    assert vllm.PROFILE.parse(b"data: [DONE]\n\n").problems[0] == "stream has no event with choices[0]"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_no_stream_raises(tail: bytes) -> None:
    parsed = vllm.PROFILE.parse(b"data: " + tail)
    assert isinstance(parsed.problems, list)


def _counts(raw: bytes, cuts: list[int]) -> tuple[int, list[str], bool]:
    reader = SseReader()
    bounds = [0, *sorted(set(cuts)), len(raw)]
    total = sum(reader.feed(raw[a:b]) for a, b in itertools.pairwise(bounds))
    return total, reader.payloads, reader.done


def test_the_reader_counts_token_events_at_every_split() -> None:
    for raw, tokens in ((_sse(VLLM_COMPLETION_EVENTS, newline=b"\r\n"), 3), (_sse(VLLM_CHAT_EVENTS), 2),
                        (TRANSFORMERS_CHAT, 2)):
        whole = _counts(raw, [])
        assert whole[0] == tokens
        for cut in range(len(raw) + 1):
            assert _counts(raw, [cut]) == whole


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=40))
def test_the_reader_reads_any_split_alike(cuts: list[int]) -> None:
    raw = b": hi\r\n\r\n" + _sse(VLLM_CHAT_EVENTS, newline=b"\r\n") + TRANSFORMERS_CHAT
    assert _counts(raw, [c % (len(raw) + 1) for c in cuts]) == _counts(raw, [])


def test_feed_returns_the_events_each_read_completed() -> None:
    reader = SseReader()
    first = b"data: " + json.dumps(VLLM_COMPLETION_EVENTS[0]).encode()
    assert reader.feed(first) == 0  # no blank line yet
    assert reader.feed(b"\n\n" + _sse(VLLM_COMPLETION_EVENTS[1:3], done=False)) == 3
    assert reader.feed(_sse(VLLM_COMPLETION_EVENTS[3:])) == 0 and reader.done  # usage and [DONE]: no token
