"""Decode against prefill (protocol.rescore, run/send/rescore.py): each measured answer beside the re-score of its own
tokens as a prompt, position by position: whether the decode step's argmax (its top-1 logprob) is the prefill's, and
|decode logprob - prefill logprob| of the token the answer chose. The seed's "forced-token logprob spread", and
vLLM #48271's question: a flip of the decode path (decode and prefill disagree) or of the prefill path (they agree,
and differ between requests). Read from the record alone: the measured and re-score rows' logprob lists, once more
after the comparison's pass (only in a run that asked for re-scores)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.engines import EngineProfile, profile_for
from orchestrator.record.reads import read_where
from orchestrator.record.recorded import Recorded, RecordedRun

RESCORE, MEASURED = "rescore", "measured"  # the roles (docs/record.md)
COLUMNS = ["arm", "prompt_id", "phase", "role", "start", "error", "request_id", "attempt", "prompt_tokens",
           "sig_token_ids", "token_ids", "token_logprobs", "top_logprobs", "prompt_logprobs"]


@dataclass(frozen=True)
class PositionCheck:
    """One answer position: the decode step's top-1 is the prefill's, and how far apart the chosen token's
    logprobs are (None: a side lacks it)."""

    position: int
    argmax_agrees: bool | None
    abs_delta: float | None


@dataclass
class DecodePrefillCell:
    """A cell's answers against their re-scores."""

    arm: str
    prompt_id: str
    phase: str
    answers: int = 0  # measured answers compared
    unscored: int = 0  # answers without a good re-score (it failed, or a resumed run sent none)
    positions: int = 0  # answer positions where both argmaxes are known
    argmax_agree: int = 0
    disagree_positions: list[int] = field(default_factory=list)  # where any answer's argmax differs (distinct)
    max_abs_delta: float | None = None  # of the chosen token's logprob, over every answer and position
    max_delta_position: int | None = None

    @property
    def argmax_share(self) -> float | None:
        return self.argmax_agree / self.positions if self.positions else None

    def add(self, checks: Sequence[PositionCheck]) -> None:
        self.answers += 1
        for check in checks:
            if check.argmax_agrees is not None:
                self.positions += 1
                self.argmax_agree += check.argmax_agrees
                if not check.argmax_agrees and check.position not in self.disagree_positions:
                    self.disagree_positions = sorted([*self.disagree_positions, check.position])
            if check.abs_delta is not None and (self.max_abs_delta is None or check.abs_delta > self.max_abs_delta):
                self.max_abs_delta, self.max_delta_position = check.abs_delta, check.position


@dataclass
class DecodePrefill:
    """The report's "Decode against prefill": per cell, and the arms whose engine cannot say (arm -> why)."""

    cells: list[DecodePrefillCell] = field(default_factory=list)
    unobservable: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """report.json's `decode_prefill`: each cell with its argmax agreement share."""
        return {"cells": [{**asdict(c), "argmax_share": c.argmax_share} for c in self.cells],
                "unobservable": self.unobservable}


def unobservable(engine: EngineProfile, chat: bool) -> str | None:
    """Why an arm's answers cannot be re-scored (`chat`: its answers came from the chat endpoint); None: they can."""
    if chat:
        return "its answers came from the chat endpoint (their prompt is the chat template's)"
    if not engine.capabilities.prompt_logprobs or engine.endpoints.completions is None:
        return f"{engine.name} serves no prompt logprobs"
    if not engine.capabilities.token_ids:
        return f"{engine.name} returns no token ids (an answer cannot be sent back as its tokens)"
    return None


def _same(decode_token: str, entry: dict[str, Any]) -> bool:
    """A decode top-logprob key (a token's text, or "token_id:N") names the prefill entry's token."""
    if decode_token.startswith("token_id:"):
        return decode_token == f"token_id:{entry['token_id']}"
    return decode_token == entry.get("token")


def compare_answer(token_ids: Sequence[int], token_logprobs: Sequence[float] | None,
                   top_logprobs: Sequence[Sequence[dict[str, Any]] | None] | None,
                   prefill: Sequence[Sequence[dict[str, Any]] | None]) -> list[PositionCheck]:
    """Each answer position against the prefill's entries for it (`prefill`: the re-score's prompt logprobs of the
    answer's positions, token_id, token and logprob each)."""
    out = []
    for i, token in enumerate(token_ids):
        entries = prefill[i] if i < len(prefill) else None
        if not entries:
            out.append(PositionCheck(i, None, None))
            continue
        top = top_logprobs[i] if top_logprobs is not None and i < len(top_logprobs) else None
        agrees = _same(max(top, key=lambda e: e["logprob"])["token"], max(entries, key=lambda e: e["logprob"])) \
            if top else None
        chosen = next((e["logprob"] for e in entries if e["token_id"] == token), None)
        decoded = token_logprobs[i] if token_logprobs is not None and i < len(token_logprobs) else None
        delta = None if decoded is None or chosen is None or math.isnan(decoded) else abs(decoded - chosen)
        out.append(PositionCheck(i, agrees, delta))
    return out


def decode_prefill(recorded: Recorded) -> DecodePrefill | None:
    """None: no run of the comparison asked for re-scores (protocol.rescore)."""
    runs = [run for run in recorded.runs if run.meta.rescore]
    if not runs:
        return None
    out = DecodePrefill()
    for run in runs:
        for arm in run.arms:
            why = unobservable(profile_for(arm.engine), arm.config.get("endpoint") == "chat")
            if why is not None:
                out.unobservable[run.label + arm.arm] = why
        out.cells += _cells(run)
    return out


def _latest(run: RecordedRun) -> list[dict[str, Any]]:
    """The measured and re-score rows of the run's first starts, the latest attempt of each request."""
    rows = read_where(run.reads.parts("responses"), "responses", COLUMNS, {"role": [MEASURED, RESCORE]}).to_pylist()
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        held = latest.get(row["request_id"])
        if not row["start"] and (held is None or (row["attempt"] or 0) >= (held["attempt"] or 0)):
            latest[row["request_id"]] = row
    return list(latest.values())


def _cells(run: RecordedRun) -> list[DecodePrefillCell]:
    rows = _latest(run)
    prefills = {(r["arm"], r["prompt_id"], r["request_id"].rsplit("/", 1)[-1]): r["prompt_logprobs"]
                for r in rows if r["role"] == RESCORE and r["error"] is None and r["prompt_logprobs"]}
    cells: dict[tuple[str, str, str], DecodePrefillCell] = {}
    for row in rows:
        if row["role"] != MEASURED or row["error"] is not None or not row["token_ids"]:
            continue
        key = (row["arm"], row["prompt_id"], row["phase"])
        cell = cells.setdefault(key, DecodePrefillCell(run.label + key[0], *key[1:]))
        prefill = prefills.get((row["arm"], row["prompt_id"], row["sig_token_ids"]))
        ids = row["token_ids"]
        # the re-score's prompt is this answer's prompt and then its tokens: its last positions are the answer's
        if prefill is None or (row["prompt_tokens"] is not None and len(prefill) != row["prompt_tokens"] + len(ids)):
            cell.unscored += 1
            continue
        cell.add(compare_answer(ids, row["token_logprobs"], row["top_logprobs"], prefill[-len(ids):]))
    return list(cells.values())
