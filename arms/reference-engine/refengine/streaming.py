"""Streamed /v1/completions answers (`"stream": true`), in vLLM's layout: one server-sent event per generated
token, sent as the engine samples it, with that token's text, logprobs and top_logprobs (and token_ids
under return_token_ids); the sequence's last token carries finish_reason, prompt_logprobs and the request's
engine_trace, where the unstreamed answer has them; then a usage event under stream_options.include_usage,
then `data: [DONE]`. Concatenated, the events give the unstreamed answer's text, tokens and logprobs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from refengine import protocol
from refengine.engine import GenRequest, GenResult
from refengine.scheduler import Job
from refengine.tokenizer import Tokenizer


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


class _Chunks:
    """Builds one request's events; the text is decoded incrementally (a character may span tokens)."""

    def __init__(self, rid: str, served: str, req: GenRequest, opts: protocol.CompletionOptions,
                 tok: Tokenizer) -> None:
        self.rid, self.served, self.req, self.opts, self.tok = rid, served, req, opts, tok
        self.created = int(time.time())
        self.text = tok.text_stream()
        self.offset = 0  # text_offset of the next token, as the unstreamed answer counts it
        self.sent = 0  # tokens sent

    def _top(self, choice: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.rid, "object": "text_completion", "created": self.created, "model": self.served,
                "choices": [choice]}

    def token(self, res: GenResult, k: int, last: bool) -> dict[str, Any]:
        """The event of the k-th generated token."""
        tok = res.output_ids[k]
        text = self.text(tok, last)
        logprobs = None
        if self.opts.logprobs is not None:
            pos = res.logprobs[k]
            name = f"token_id:{tok}" if self.opts.as_token_ids else self.tok.token_str(tok)
            logprobs = {"tokens": [name], "token_logprobs": [protocol.logprob_value(pos.logprob)],
                        "top_logprobs": [protocol.top_dict(pos, self.opts.as_token_ids, self.tok)],
                        "text_offset": [self.offset]}
            self.offset += len(name)
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": None,
                                  "stop_reason": None}
        if self.opts.return_token_ids:
            choice["token_ids"] = [tok]
        chunk = self._top(choice)
        if self.sent == 0 and self.opts.return_token_ids:
            choice["prompt_token_ids"] = chunk["prompt_token_ids"] = list(self.req.prompt_ids)
        self.sent += 1
        return chunk

    def finish(self, chunk: dict[str, Any], res: GenResult, job: Job) -> dict[str, Any]:
        """The last event gets what the unstreamed answer says once: finish, prompt logprobs, the trace."""
        choice = chunk["choices"][0]
        choice["finish_reason"] = res.finish_reason
        if self.opts.prompt_logprobs is not None and res.prompt_logprobs is not None:
            choice["prompt_logprobs"] = [None if p is None else protocol.prompt_entry(p, self.tok)
                                         for p in res.prompt_logprobs]
        chunk["engine_trace"] = job.trace()
        return chunk

    def usage(self, res: GenResult) -> dict[str, Any]:
        return {"id": self.rid, "object": "text_completion", "created": self.created, "model": self.served,
                "choices": [], "usage": protocol.usage(self.req, res)}


def events(job: Job, rid: str, served: str, opts: protocol.CompletionOptions, timeout_s: float,
           tok: Tokenizer) -> Iterator[bytes]:
    """The request's events, each as soon as the engine has its token (the job must be submitted streamed)."""
    assert job.tokens is not None
    chunks = _Chunks(rid, served, job.request, opts, tok)
    res: GenResult | None = None
    while True:
        item = job.tokens.get(timeout=timeout_s)
        if item is None:  # the batch is over and this sequence sent no finished token (max_tokens 0, a failure)
            if job.error is not None:
                yield _event(protocol.APIError(500, str(job.error), "InternalServerError").body())
                yield DONE
                return
            res = job.wait(0)
            chunk = chunks._top({"index": 0, "text": "", "logprobs": None, "finish_reason": None, "stop_reason": None})
            yield _event(chunks.finish(chunk, res, job))
            break
        res, finished = item
        chunk = chunks.token(res, chunks.sent, finished)
        if finished:
            yield _event(chunks.finish(chunk, res, job))
            break
        yield _event(chunk)
    if opts.include_usage:
        yield _event(chunks.usage(res))
    yield DONE
