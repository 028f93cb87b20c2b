"""protocol.rescore: after an arm's phases, each distinct answer of its cells sent again as a prompt (the prompt's
token ids, then the answer's) with `prompt_logprobs` and max_tokens 1: one prefill's logprobs of the very tokens the
decode steps chose. Role and phase `rescore`, request id ARM/PROMPT/rescore/ANSWER (ANSWER: the answer's token-id
signature, so one row per distinct answer, the same id on a resume); in no cell. analysis/decode_prefill.py compares
each answer with its re-score, position by position (docs/record.md, docs/usage.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.config.schema import Endpoint, PhaseKind, ProtocolConfig
from orchestrator.engines import EngineProfile
from orchestrator.run.send import protocol
from orchestrator.run.wire.client import CompletionClient

RESCORE = "rescore"
ASKED = {"return_token_ids": True}  # what every request of an arm re-scored carries: the answer's token ids


@dataclass(frozen=True)
class RescoreRequest(protocol.Request):
    answer: str = ""  # the signature of the answer's token ids (analysis/signatures.py)

    def request_id(self, arm: str) -> str:
        return f"{arm}/{self.prompt_id}/{RESCORE}/{self.answer}"


class Answers:
    """The distinct answers of an arm's cells as their rows are recorded: (prompt, token-id signature) -> the token
    ids, the first of each. A sender's rule (run/send/sender.py GroupRule) that decides nothing."""

    skipped_because = ""  # it leaves nothing unsent

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], list[int]] = {}

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:  # a resume's recorded rows lack the token ids: what they answered is re-scored already
            ids, signature = row.get("token_ids"), row.get("sig_token_ids")
            if row.get("role") == protocol.MEASURED and row.get("error") is None and ids and signature \
                    and not row.get("start"):
                self.seen.setdefault((str(row["prompt_id"]), str(signature)), list(ids))

    def resolve(self, group: list[protocol.Request]) -> list[protocol.Request]:
        return group


async def requests(client: CompletionClient, answers: Answers, prompts: Mapping[str, str | list[int]],
                   proto: ProtocolConfig, model: str | None, engine: EngineProfile,
                   extra: Mapping[str, Any]) -> list[list[protocol.Request]]:
    """A group of one per distinct answer; a text prompt's token ids as the arm's server makes them (its
    tokenize endpoint, as protocol.request.prompt_as=token_ids sends them)."""
    wanted = {prompt_id for prompt_id, _ in answers.seen}
    texts = {p: t for p, t in prompts.items() if p in wanted and isinstance(t, str)}
    ids = {p: t for p, t in prompts.items() if isinstance(t, list)}
    if texts:
        ids.update(await protocol.token_ids(client, model, texts, engine))
    path = protocol.request_path(engine, Endpoint.completions)
    return [[RescoreRequest(prompt_id, RESCORE, PhaseKind.sequential, 0, 0, index, {
        **({} if model is None else {"model": model}), "prompt": [*ids[prompt_id], *tokens], "max_tokens": 1,
        "temperature": 0.0, "prompt_logprobs": proto.request.logprobs, **extra}, path, RESCORE, answer=signature)]
        for index, ((prompt_id, signature), tokens) in enumerate(answers.seen.items())]
