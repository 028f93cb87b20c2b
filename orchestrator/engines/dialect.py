"""Response dialects: how an engine's completion body becomes record fields. `Dialect` reads the
OpenAI-compatible body every engine here answers with; a profile whose engine says more (engines/vllm.py:
token ids in token names; engines/reference.py: its own trace) extends it. Malformed bodies never raise: the
row keeps the raw bytes and says what was wrong in `error`."""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParsedCompletion:
    completion_text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # usage.prompt_tokens_details.cached_tokens: how many prompt tokens the engine's prefix cache served (vLLM
    # says it with --enable-prompt-tokens-details, the reference engine always); None: the answer does not say
    cached_prompt_tokens: int | None = None
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    token_logprobs: list[float] | None = None
    top_logprobs: list[list[dict[str, Any]] | None] | None = None
    prompt_logprobs: list[list[dict[str, Any]] | None] | None = None
    # An engine's own trace of the request (a dialect that reads one: engines/reference.py): when it was
    # complete at the server (wall clock, ns) and the engine steps it ran in, first and last; else None.
    server_arrival_ns: int | None = None
    server_steps: tuple[int, int] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        return "; ".join(self.problems) or None


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"logprob {value!r} is not a number")
    return float(value)


_INT64 = 2**63


def int64(value: Any) -> int:
    """A JSON integer that fits the record's int64 columns (ids may arrive as JSON strings)."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT64 <= value < _INT64:
        raise TypeError(f"{value!r} is not a 64-bit integer")
    return value


def _optional(value: Any, kind: type) -> Any:
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{value!r} is not a {kind.__name__} or null")
    return value


class Dialect:
    """The OpenAI-compatible response body (/v1/completions and /v1/chat/completions): text, finish reason,
    usage, logprobs and top-k, prompt logprobs, token ids. An engine that says more (token ids in token
    names, a trace of its own) overrides the hooks below."""

    def token_id(self, token: str) -> int | None:
        """The token id a logprobs token name carries; None: names carry none."""
        return None

    def trace(self, doc: dict[str, Any], out: ParsedCompletion) -> None:
        """Read the engine's own trace of the request into `out` (informative only: never a problem)."""

    def parse(self, body: bytes) -> ParsedCompletion:
        out = ParsedCompletion()
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            out.problems.append(f"body is not JSON: {exc}")
            return out
        if not isinstance(doc, dict):
            out.problems.append(f"body is JSON {type(doc).__name__}, not an object")
            return out
        if "error" in doc and "choices" not in doc:
            err = doc["error"]
            out.problems.append(f"server error: {err.get('message', err) if isinstance(err, dict) else err}")
            return out
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            out.problems.append("no choices[0] in body")
            return out
        choice = choices[0]
        _parse_usage(doc.get("usage"), out)
        self.trace(doc, out)
        chat = "message" in choice  # /v1/chat/completions: text in message.content, logprobs.content
        if chat:
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
        else:
            text = choice.get("text")
        out.completion_text = text if isinstance(text, str) else None
        if out.completion_text is None:
            out.problems.append(f"choices[0].{'message.content' if chat else 'text'} missing or not a string")
        reason = choice.get("finish_reason")
        out.finish_reason = reason if isinstance(reason, str) else None
        # Chat responses carry prompt_logprobs and prompt_token_ids at the top level, not in the choice.
        fields = (("logprobs", choice, _parse_chat_logprobs if chat else _parse_logprobs),
                  ("prompt_logprobs", doc if chat else choice, _parse_prompt_logprobs),
                  ("token_ids", choice, _parse_token_ids))
        for name, holder, parser in fields:
            if holder.get(name) is not None:
                try:
                    parser(holder[name], out)
                except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
                    out.problems.append(f"{'' if holder is doc else 'choices[0].'}{name} malformed: {exc}")
        if out.token_ids is None and out.tokens and all(self.token_id(t) is not None for t in out.tokens):
            out.token_ids = [self.token_id(t) for t in out.tokens]  # type: ignore[misc]
        return out


def _parse_usage(usage: Any, out: ParsedCompletion) -> None:
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "completion_tokens"):
            with contextlib.suppress(TypeError):  # usage is informative only
                setattr(out, key, int64(usage.get(key)))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            with contextlib.suppress(TypeError):
                out.cached_prompt_tokens = int64(details.get("cached_tokens"))


def _parse_logprobs(logprobs: dict[str, Any], out: ParsedCompletion) -> None:
    if not isinstance(logprobs, dict):
        raise TypeError(f"expected an object, got {type(logprobs).__name__}")
    tokens = logprobs.get("tokens")
    if tokens is not None:
        out.tokens = [str(t) for t in tokens]
    values = logprobs.get("token_logprobs")
    if values is not None:
        out.token_logprobs = [math.nan if v is None else _float(v) for v in values]
    top = logprobs.get("top_logprobs")
    if top is not None:
        out.top_logprobs = [
            None if position is None
            else [{"token": str(tok), "logprob": _float(lp)} for tok, lp in position.items()]
            for position in top
        ]
    lengths = {name: len(v) for name, v in (("tokens", out.tokens), ("token_logprobs", out.token_logprobs),
                                            ("top_logprobs", out.top_logprobs)) if v is not None}
    if len(set(lengths.values())) > 1:  # positions would be misattributed in every per-token column
        raise ValueError(f"per-position lists of different lengths: {lengths}")


def _parse_chat_logprobs(logprobs: dict[str, Any], out: ParsedCompletion) -> None:
    content = logprobs["content"]
    if content is None:
        return
    out.tokens = [str(entry["token"]) for entry in content]
    out.token_logprobs = [_float(entry["logprob"]) for entry in content]
    out.top_logprobs = [[{"token": str(top["token"]), "logprob": _float(top["logprob"])}
                         for top in entry.get("top_logprobs") or []] for entry in content]


def _parse_prompt_logprobs(prompt_logprobs: list[Any], out: ParsedCompletion) -> None:
    parsed: list[list[dict[str, Any]] | None] = []
    for position in prompt_logprobs:
        if position is None:
            parsed.append(None)
            continue
        parsed.append([
            {"token_id": int64(tid), "token": _optional(entry.get("decoded_token"), str),
             "logprob": _float(entry["logprob"]),
             "rank": None if entry.get("rank") is None else int64(entry["rank"])}
            for tid, entry in position.items()
        ])
    out.prompt_logprobs = parsed


def _parse_token_ids(token_ids: list[Any], out: ParsedCompletion) -> None:
    out.token_ids = [int64(t) for t in token_ids]

