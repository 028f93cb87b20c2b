"""`length_tokens: N` at run time: each such prompt is sent as exactly its first N tokens under the arm's
own tokenizer. Where its engine profile serves a tokenize endpoint, as ids: the server's usage.prompt_tokens
must count N (run/send/protocol.py prompt_token_check: a mismatch is an error on that request, never part of a
cell). Else from the model's tokenizer files, read inside the arm with its own interpreter
(probes/tokenize_prompt.py), as the text of exactly N tokens: one request per such prompt (max_tokens 1)
checks that the server counts N before the protocol, and a mismatch refuses the arm."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator import probes
from orchestrator.config.schema import PromptSetConfig
from orchestrator.engines.profile import EngineProfile
from orchestrator.errors import ConfigError, EngineFailure
from orchestrator.run.send import protocol
from orchestrator.run.wire.client import CompletionClient

if TYPE_CHECKING:
    from orchestrator.runtime.spec import Handle, Runtime


@dataclass(frozen=True)
class ArmTokenizer:
    """Where the model's tokenizer files are read: inside the running arm, with its interpreter."""

    runtime: Runtime
    handle: Handle
    python: str | None  # None: not knowable (config/arms.py arm_interpreter)
    model: str | None  # the folder (or hub id, offline) as the engine profile reads it; None: not stated


def lengths(prompt_set: PromptSetConfig) -> dict[str, int]:
    return {pid: p.length_tokens for pid, p in prompt_set.prompts.items() if p.length_tokens is not None}


async def exact(client: CompletionClient, model: str | None, sent: Mapping[str, str | list[int]],
                wanted: Mapping[str, int], engine: EngineProfile, arm: str,
                files: ArmTokenizer | None = None) -> dict[str, str | list[int]]:
    """`sent` with each prompt of `wanted` as its first N tokens: ids where the engine tokenizes (by the
    server unless already ids), else the text of N tokens under the model's tokenizer files (`files`)."""
    if engine.endpoints.tokenize is None:
        return await _from_files(client, model, sent, wanted, engine, arm, files)
    texts = {pid: text for pid, text in sent.items() if pid in wanted and isinstance(text, str)}
    ids: dict[str, list[int]] = {pid: list(v) for pid, v in sent.items() if pid in wanted and isinstance(v, list)}
    ids |= await protocol.token_ids(client, model, texts, engine) if texts else {}
    out = dict(sent)
    for pid, n in wanted.items():
        if pid not in ids:
            continue
        if len(ids[pid]) < n:
            raise ConfigError(f"prompt '{pid}': its text is {len(ids[pid])} tokens under arm {arm}'s tokenizer, "
                              f"fewer than length_tokens={n}: give it a longer text (or file)")
        out[pid] = ids[pid][:n]
    return out


async def _from_files(client: CompletionClient, model: str | None, sent: Mapping[str, str | list[int]],
                      wanted: Mapping[str, int], engine: EngineProfile, arm: str,
                      files: ArmTokenizer | None) -> dict[str, str | list[int]]:
    texts = {pid: (text, wanted[pid]) for pid, text in sent.items() if pid in wanted and isinstance(text, str)}
    if not texts:
        return dict(sent)
    where = f"length_tokens: arm {arm}'s engine {engine.name} serves no tokenize endpoint, so its model's " \
            "tokenizer files are read inside it"
    if files is None or files.python is None or files.model is None:
        missing = "its interpreter (set the arm's `python`)" if files is None or files.python is None \
            else "its model (the arm's engine_args name none)"
        raise ConfigError(f"{where}, but {missing} is not known: set it, or drop length_tokens for this arm")
    payload = base64.b64encode(zlib.compress(json.dumps({"prompts": texts}).encode()))
    argv = [files.python, "-c", probes.source("tokenize_prompt"), payload.decode(), files.model]
    import asyncio  # here: the checks import this module, and asyncio costs their start (test_startup_imports)

    result = await asyncio.to_thread(files.runtime.exec, files.handle, argv)
    answer = result.last_json_object() if result.exit_code == 0 else None
    if answer is None or "error" in answer:
        said = answer["error"] if answer else f"exit {result.exit_code}: {result.output.strip()[-300:]}"
        raise ConfigError(f"{where}: {said}; give a longer text (or file), or drop length_tokens for this arm")
    out = dict(sent)
    for pid, n in wanted.items():
        if pid in texts:
            out[pid] = answer["prompts"][pid]["text"]
            await _server_counts(client, model, pid, out[pid], n, engine, arm)
    return out


async def _server_counts(client: CompletionClient, model: str | None, pid: str, text: str | list[int], n: int,
                         engine: EngineProfile, arm: str) -> None:
    """The server counts the text as N prompt tokens too, or the arm is refused before its protocol."""
    body: dict[str, object] = {"prompt": text, "max_tokens": 1}
    if model is not None:
        body["model"] = model
    exchange = await client.complete(body, engine.endpoints.completions or "/v1/completions")
    if exchange.status != 200:  # refused: most often longer than the model's context
        said = exchange.body.decode(errors="replace").strip()[:300] or exchange.error or "no answer"
        raise EngineFailure(f"length_tokens: arm {arm}'s server refused prompt '{pid}' of {n} tokens (HTTP "
                            f"{exchange.status}: {said}): if that is more than the model's context, ask for fewer "
                            "tokens (triage: --long-prompt-tokens N), or drop length_tokens for this arm")
    counted = engine.parse(exchange.body).prompt_tokens
    if counted != n:
        raise EngineFailure(f"length_tokens: prompt '{pid}' is {n} tokens under arm {arm}'s tokenizer files but "
                            f"its server counted {counted}: the files are not the tokenizer it serves with; drop "
                            "length_tokens for this arm")
