"""`length_tokens: N` at run time: each such prompt is sent as exactly its first N tokens under the arm's
own tokenizer (its engine profile's tokenize endpoint), as ids; the server's usage.prompt_tokens must count
N (run/protocol.py prompt_token_check: a mismatch is an error on that request, never part of a cell)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.schema import PromptSetConfig
from orchestrator.engines.profile import EngineProfile
from orchestrator.errors import ConfigError
from orchestrator.run import protocol
from orchestrator.run.client import CompletionClient


def lengths(prompt_set: PromptSetConfig) -> dict[str, int]:
    return {pid: p.length_tokens for pid, p in prompt_set.prompts.items() if p.length_tokens is not None}


async def exact(client: CompletionClient, model: str | None, sent: Mapping[str, str | list[int]],
                wanted: Mapping[str, int], engine: EngineProfile, arm: str) -> dict[str, str | list[int]]:
    """`sent` with each prompt of `wanted` as its first N token ids (tokenized by the server unless already
    ids)."""
    if engine.endpoints.tokenize is None:
        raise ConfigError(f"length_tokens needs the arm's tokenizer: arm {arm}'s engine {engine.name} serves no "
                          "tokenize endpoint (reading a model's tokenizer files is not supported yet); drop "
                          "length_tokens for this arm")
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
