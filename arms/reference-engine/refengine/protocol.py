"""vLLM-shaped request validation and response building for /v1/completions."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from refengine.config import EngineConfig
from refengine.engine import GenRequest, GenResult, TokenLogprobs
from refengine.tokenizer import BYTES, Tokenizer


class APIError(Exception):
    """An error rendered as vLLM's ``{"error": {...}}`` body."""

    def __init__(self, status: int, message: str, type_: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


@dataclass
class CompletionOptions:
    """What the response builder needs besides the generation result."""

    echo: bool
    logprobs: int | None
    prompt_logprobs: int | None
    return_token_ids: bool
    as_token_ids: bool
    stream: bool = False  # answered as server-sent events (refengine/streaming.py)
    include_usage: bool = False  # stream_options.include_usage: a last event with the usage


def _bool(body: dict[str, Any], name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise APIError(400, f"'{name}' must be a boolean", param=name)
    return v


def _int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise APIError(400, f"'{name}' must be an integer", param=name)
    return v


def prompt_ids(prompt: Any, tok: Tokenizer = BYTES) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        ids = tok.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if any(t < 0 or t >= tok.vocab_size for t in prompt):
            raise APIError(400, f"Token id out of range [0, {tok.vocab_size})", param="prompt")
        ids = list(prompt)
    else:
        raise APIError(400, "'prompt' must be a string, a list of token ids, or a list of one of those", param="prompt")
    if not ids:
        raise APIError(400, "The prompt cannot be empty", param="prompt")
    return ids


def _check_logprobs(value: int | None, cap: int, what: str, param: str, vocab_size: int) -> int | None:
    if value is None:
        return None
    if value == -1:
        value = vocab_size
    elif value < 0:
        raise APIError(400, f"{param} must be a non-negative integer or -1", param=param)
    if cap != -1 and value > cap:
        raise APIError(
            400, f"Requested {what} logprobs of {value}, which is greater than max allowed: {cap}", param=param
        )
    return value


def parse_completion(body: Any, cfg: EngineConfig, tok: Tokenizer = BYTES) -> tuple[GenRequest, CompletionOptions]:
    if not isinstance(body, dict):
        raise APIError(400, "Request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in (cfg.served_name, cfg.model):
        raise APIError(404, f"The model `{model}` does not exist.", type_="NotFoundError", param="model")
    if "prompt" not in body:
        raise APIError(400, "'prompt' is required", param="prompt")
    ids = prompt_ids(body["prompt"], tok)
    stream, include_usage = _stream_options(body)
    n = _int(body, "n", 1)
    if n != 1:
        raise APIError(400, "Only n=1 is supported", param="n")
    max_tokens = _int(body, "max_tokens", 16)
    assert max_tokens is not None
    if max_tokens < 0:
        raise APIError(400, "max_tokens must be at least 0", param="max_tokens")
    temp = body.get("temperature", 1.0)
    if temp is None:
        temp = 1.0
    if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp):
        raise APIError(400, "'temperature' must be a number", param="temperature")
    if not 0.0 <= temp <= 2.0:
        raise APIError(400, f"temperature must be in [0, 2], got {temp}.", param="temperature")
    seed = _int(body, "seed", None)
    if seed == -1:
        seed = None
    logprobs = _check_logprobs(_int(body, "logprobs", None), cfg.max_logprobs, "sample", "logprobs", tok.vocab_size)
    prompt_lp = _check_logprobs(
        _int(body, "prompt_logprobs", None), cfg.max_logprobs, "prompt", "prompt_logprobs", tok.vocab_size
    )
    echo = _bool(body, "echo")
    if len(ids) > cfg.max_model_len or len(ids) + max_tokens > cfg.max_model_len:
        raise APIError(
            400,
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
            f"{len(ids) + max_tokens} tokens ({len(ids)} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion.",
            param="prompt",
        )
    # As in vLLM, echo with logprobs needs prompt logprobs even when not asked for explicitly.
    engine_prompt_lp = prompt_lp if prompt_lp is not None else (logprobs if echo and logprobs is not None else None)
    req = GenRequest(
        prompt_ids=ids,
        max_tokens=max_tokens,
        temperature=float(temp),
        seed=seed,
        logprobs=logprobs,
        prompt_logprobs=engine_prompt_lp,
        ignore_eos=_bool(body, "ignore_eos"),
        digest=_bool(body, "digest"),
    )
    opts = CompletionOptions(
        echo=echo,
        logprobs=logprobs,
        prompt_logprobs=prompt_lp,
        return_token_ids=_bool(body, "return_token_ids"),
        as_token_ids=_bool(body, "return_tokens_as_token_ids"),
        stream=stream,
        include_usage=include_usage,
    )
    return req, opts


def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage), with vLLM's 400s for stream_options without stream."""
    stream = _bool(body, "stream")
    if stream and _bool(body, "echo"):
        raise APIError(400, "refengine does not stream an echoed prompt: send echo or stream, not both", param="echo")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise APIError(400, "'stream_options' must be an object", param="stream_options")
    if not stream:
        raise APIError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
    return stream, _bool(options, "include_usage")


def new_request_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def logprob_value(v: float) -> float:
    return -9999.0 if v == float("-inf") else v


def top_dict(pos: TokenLogprobs, as_ids: bool, tok: Tokenizer = BYTES) -> dict[str, float]:
    def key(t: int) -> str:
        return f"token_id:{t}" if as_ids else tok.token_str(t)

    out = {key(pos.token_id): logprob_value(pos.logprob)}  # chosen token first, then ranks 1..k
    for t, v in pos.top:
        out.setdefault(key(t), logprob_value(v))
    return out


def prompt_entry(pos: TokenLogprobs, tok: Tokenizer = BYTES) -> dict[str, dict[str, Any]]:
    out = {str(pos.token_id): {"logprob": logprob_value(pos.logprob), "rank": pos.rank,
                               "decoded_token": tok.token_str(pos.token_id)}}
    for rank, (t, v) in enumerate(pos.top, start=1):
        out.setdefault(str(t), {"logprob": logprob_value(v), "rank": rank, "decoded_token": tok.token_str(t)})
    return out


def build_response(
    request_id: str, served: str, req: GenRequest, opts: CompletionOptions, res: GenResult, tok: Tokenizer = BYTES
) -> dict[str, Any]:
    text = tok.decode(res.output_ids)
    if opts.echo:
        text = tok.decode(req.prompt_ids) + text
    logprobs: dict[str, Any] | None = None
    if opts.logprobs is not None:
        ids: list[int] = []
        lps: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        if opts.echo:
            plp = res.prompt_logprobs or [None] * len(req.prompt_ids)
            for t, pos in zip(req.prompt_ids, plp, strict=True):
                ids.append(t)
                lps.append(None if pos is None else logprob_value(pos.logprob))
                tops.append(None if pos is None else top_dict(pos, opts.as_token_ids, tok))
        for pos in res.logprobs:
            ids.append(pos.token_id)
            lps.append(logprob_value(pos.logprob))
            tops.append(top_dict(pos, opts.as_token_ids, tok))
        strs = [f"token_id:{t}" if opts.as_token_ids else tok.token_str(t) for t in ids]
        offsets, off = [], 0
        for s in strs:
            offsets.append(off)
            off += len(s)
        logprobs = {"tokens": strs, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": res.finish_reason,
        "stop_reason": None,
        "prompt_logprobs": None,
    }
    if opts.prompt_logprobs is not None and res.prompt_logprobs is not None:
        choice["prompt_logprobs"] = [None if p is None else prompt_entry(p, tok) for p in res.prompt_logprobs]
    body: dict[str, Any] = {
        "id": request_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": served,
        "choices": [choice],
    }
    if opts.return_token_ids:
        choice["prompt_token_ids"] = list(req.prompt_ids)
        choice["token_ids"] = list(res.output_ids)
        body["prompt_token_ids"] = list(req.prompt_ids)
    body["usage"] = usage(req, res)
    return body


def usage(req: GenRequest, res: GenResult) -> dict[str, Any]:
    """The answer's usage, as vLLM's with --enable-prompt-tokens-details: how many of the prompt's tokens came
    from the prefix cache (0 with it off)."""
    prompt, completion = len(req.prompt_ids), len(res.output_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": res.cached_tokens}}
