"""Streamed answers: OpenAI server-sent events (`"stream": true`), read as they arrive and turned back into
the body the same endpoint answers unstreamed, so every dialect (engines/dialect.py and its engines')
parses a streamed answer unchanged.

Layouts read (docs/reference-engine.md, "Streaming"):
- vLLM (entrypoints/openai/{completion,chat_completion}/serving.py): one event a step; completions carry
  choices[0].text, logprobs {tokens, token_logprobs, top_logprobs, text_offset} of that delta, token_ids,
  prompt_token_ids in the first; chat a first event {delta: {role, content: ""}} with prompt_token_ids at
  the top, then delta.content with logprobs.content entries; finish_reason on the last content event; a
  usage event with choices [] when stream_options.include_usage; then `data: [DONE]`. A failure mid-stream
  is an event {"error": {...}}.
- transformers serve (cli/serving/{completion,chat_completion}.py): both endpoints stream; text deltas,
  no logprobs, a last event with only finish_reason, the usage event, no `data: [DONE]`; a failure is
  {"error": "<message>"}.
- the reference engine: vLLM's completions layout, its engine_trace and prompt_logprobs on the last event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"


def is_sse(body: bytes) -> bool:
    """Whether a response body is an event stream rather than one JSON document: it opens with an event's
    data or a comment."""
    head = body.lstrip()
    return head[:5] == b"data:" or head[:1] == b":"


class SseReader:
    """Reads an event stream incrementally: `feed` each read as it arrives. Handles events split across
    reads, comments, \\r\\n, \\r or \\n line ends, multi-line data and `data: [DONE]`."""

    def __init__(self) -> None:
        self._pending = b""  # an incomplete line
        self._data: list[str] = []  # data lines of the event being read
        self.payloads: list[str] = []  # every completed event's data, in order ([DONE] included)
        self.token_events = 0  # completed events that carried at least one generated token
        self.done = False  # `data: [DONE]` was read

    def feed(self, data: bytes) -> int:
        """Take the next bytes; returns how many token-bearing events they completed."""
        before = self.token_events
        buf = self._pending + data
        start = 0
        while True:
            cut = _line_end(buf, start)
            if cut is None:
                break
            end, after = cut
            self._line(buf[start:end].decode("utf-8", "replace"))
            start = after
        self._pending = buf[start:]
        return self.token_events - before

    def _line(self, line: str) -> None:
        if not line:  # a blank line dispatches the event
            if self._data:
                self._dispatch("\n".join(self._data))
                self._data = []
            return
        if line.startswith(":"):  # a comment (keep-alive)
            return
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)

    def _dispatch(self, payload: str) -> None:
        self.payloads.append(payload)
        if payload.strip() == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except ValueError:
            return
        if _bears_tokens(chunk):
            self.token_events += 1


def _line_end(buf: bytes, start: int) -> tuple[int, int] | None:
    """(end of the line, start of the next) for the first complete line from `start`; None: none yet. A \\r
    at the very end waits: the \\n of its \\r\\n may be in the next read."""
    lf = buf.find(b"\n", start)
    cr = buf.find(b"\r", start, lf if lf >= 0 else len(buf))
    if cr >= 0:
        if cr + 1 == len(buf):
            return None
        return cr, cr + 2 if buf[cr + 1:cr + 2] == b"\n" else cr + 1
    return None if lf < 0 else (lf, lf + 1)


def _choice0(chunk: Any) -> dict[str, Any] | None:
    if not isinstance(chunk, dict):
        return None
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def _bears_tokens(chunk: Any) -> bool:
    """A generated token in this event: text, content or reasoning, token ids, or logprobs entries."""
    choice = _choice0(chunk)
    if choice is None:
        return False
    delta = choice.get("delta")
    texts = [choice.get("text")]
    if isinstance(delta, dict):
        texts += [delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning")]
    if any(isinstance(t, str) and t for t in texts) or choice.get("token_ids"):
        return True
    logprobs = choice.get("logprobs")
    return isinstance(logprobs, dict) and bool(logprobs.get("tokens") or logprobs.get("content"))


@dataclass
class Assembled:
    """The unstreamed body a stream amounts to, and what was wrong with the stream (never raised)."""

    body: bytes
    problems: list[str] = field(default_factory=list)


def assembled(raw: bytes) -> bytes:
    """An OpenAI event stream (completions or chat) as the JSON body the same endpoint answers unstreamed."""
    return assemble(raw).body


def assemble(raw: bytes) -> Assembled:
    reader = SseReader()
    reader.feed(raw)
    reader.feed(b"\n\n")  # a last event with no blank line after it still counts (JSON tells if it is whole)
    problems: list[str] = []
    top: dict[str, Any] = {}
    merged = _Merged()
    error: Any = None
    for n, payload in enumerate(reader.payloads):
        if payload.strip() == DONE:
            continue
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            problems.append(f"event {n} is not JSON: {exc}")
            continue
        if not isinstance(chunk, dict):
            problems.append(f"event {n} is JSON {type(chunk).__name__}, not an object")
            continue
        if "error" in chunk and "choices" not in chunk:
            error = chunk["error"]
            continue
        for key, value in chunk.items():
            if key != "choices" and value is not None:
                top[key] = value  # the last event's id, usage, trace... win
        choice = _choice0(chunk)
        if choice is not None:
            try:
                merged.add(choice)
            except (TypeError, AttributeError) as exc:
                problems.append(f"event {n} choices[0] malformed: {exc}")
    if error is not None:
        return Assembled(json.dumps({"error": error}).encode(), problems)
    if merged.events == 0:
        problems.append("stream has no event with choices[0]")
    elif merged.finish_reason is None:
        problems.append("stream ended before a finish_reason (truncated)")
    chat = merged.chat
    if isinstance(top.get("object"), str):
        top["object"] = "chat.completion" if chat else "text_completion"
    top["choices"] = [merged.choice()] if merged.events else []
    return Assembled(json.dumps(top).encode(), problems)


class _Merged:
    """choices[0] of every event, concatenated into the unstreamed choice."""

    def __init__(self) -> None:
        self.events = 0
        self.chat = False
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.role = "assistant"
        self.finish_reason: str | None = None
        self.fields: dict[str, Any] = {}  # other fields, the last non-null wins (stop_reason, prompt_*)
        self.token_ids: list[Any] | None = None
        self.logprobs: dict[str, list[Any]] | None = None  # completions: per-position lists; chat: content

    def add(self, choice: dict[str, Any]) -> None:
        self.events += 1
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self.chat = True
            self.role = delta.get("role") or self.role
            for key, into in (("content", self.text), ("reasoning_content", self.reasoning),
                              ("reasoning", self.reasoning)):
                if isinstance(delta.get(key), str):
                    into.append(delta[key])
        elif isinstance(choice.get("text"), str):
            self.text.append(choice["text"])
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        if choice.get("token_ids") is not None:
            self.token_ids = self.token_ids if self.token_ids is not None else []
            self.token_ids.extend(choice["token_ids"])
        if choice.get("logprobs") is not None:
            self._logprobs(choice["logprobs"])
        for key, value in choice.items():
            if key not in ("index", "delta", "text", "finish_reason", "token_ids", "logprobs") and value is not None:
                self.fields[key] = value

    def _logprobs(self, logprobs: dict[str, Any]) -> None:
        self.logprobs = self.logprobs if self.logprobs is not None else {}
        for key, values in logprobs.items():
            if values is not None:
                self.logprobs.setdefault(key, []).extend(values)

    def choice(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": 0, **self.fields}
        if self.chat:
            message: dict[str, Any] = {"role": self.role, "content": "".join(self.text)}
            if self.reasoning:
                message["reasoning_content"] = "".join(self.reasoning)
            out["message"] = message
        else:
            out["text"] = "".join(self.text)
        out["logprobs"] = self.logprobs
        out["finish_reason"] = self.finish_reason
        if self.token_ids is not None:
            out["token_ids"] = self.token_ids
        return out
