"""The explorer's second pass: the tokens and top-k lists of a cell's few representative requests, read from the
record by request id, and each branch aligned on the modal one: where it first parts from it (another token, or
the same token with other logprobs), the later first token flip, the top-k at both, and the window of positions
shown around them (analysis/explorer.py keeps the branches; this reads and aligns them)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from orchestrator.analysis.results import Completion, Flip, TopEntry
from orchestrator.record.reads import rows_by_id
from orchestrator.record.recorded import Recorded

BEFORE, AFTER, WIDEST = 4, 8, 40  # the window: positions before and after each split and flip; at most, in all
DETAIL = ["request_id", "attempt", "tokens", "token_ids", "token_logprobs", "top_logprobs", "top_gaps",
          "completion_text"]


@dataclass
class Detail:
    codes: list[Any]  # token ids, else token strings: what the comparison compares
    tokens: list[str]
    logprobs: list[float | None]
    top: list[list[dict[str, Any]] | None]
    gaps: list[float | None]
    text: str



def read_details(recorded: Recorded, wanted: set[str]) -> dict[str, Detail]:
    """The tokens and top-k lists of the wanted requests (ids as the comparison labels them), latest attempts, from
    the row groups that hold them (the parts' footers as the comparison's pass read them)."""
    out: dict[str, Detail] = {}
    attempts: dict[str, int] = {}
    for run in recorded.runs:
        ids = sorted(i[len(run.label):] for i in wanted if i.startswith(run.label))
        if not ids:
            continue
        for row in rows_by_id(run.reads.parts("responses"), ids, DETAIL):
            key, attempt = run.label + row["request_id"], row["attempt"] or 0
            if attempt < attempts.get(key, -1):
                continue
            attempts[key] = attempt
            tokens = row["tokens"] or [str(t) for t in row["token_ids"] or []]
            out[key] = Detail(row["token_ids"] if row["token_ids"] is not None else tokens, tokens,
                               row["token_logprobs"] or [], row["top_logprobs"] or [], row["top_gaps"] or [],
                               row["completion_text"] or "")
    return out


def _split(first: Detail, other: Detail) -> tuple[int | None, str, int | None]:
    """Where `other` first parts from `first`, whatever differs: another token ("token"), or the same token with
    another logprob or top-k ("logprob"); and the first position with another token (None: the same tokens)."""
    length = max(len(first.codes), len(other.codes))
    flip = next((i for i in range(length) if i >= len(first.codes) or i >= len(other.codes)
                 or first.codes[i] != other.codes[i]), None)
    logprob = next((i for i in range(length if flip is None else flip)
                    if _logprobs_at(first, i) != _logprobs_at(other, i)), None)
    if logprob is not None:
        return logprob, "logprob", flip
    return flip, "" if flip is None else "token", flip


def _logprobs_at(detail: Detail, position: int) -> tuple[float | None, list[dict[str, Any]] | None]:
    """The chosen token's logprob and the top-k at a position; a missing or NaN logprob reads as None."""
    value = detail.logprobs[position] if position < len(detail.logprobs) else None
    return (None if value is None or value != value else value,
            detail.top[position] if position < len(detail.top) else None)


def _top(detail: Detail, position: int) -> list[TopEntry]:
    """The top-k at a position, most likely first (an entry the server repeated, once)."""
    entries = detail.top[position] if position < len(detail.top) else None
    unique = {(e["token"], e["logprob"]) for e in entries or [] if e["logprob"] is not None}
    return [TopEntry(str(t), float(lp)) for t, lp in sorted(unique, key=lambda e: (-e[1], e[0]))]


def _at(first: Detail, other: Detail, position: int, near_tie_gap: float
        ) -> tuple[list[TopEntry], list[TopEntry], float | None, bool | None]:
    """At a position: `other`'s top-k, the first's, the first's top1 - top2 gap, and whether that is a near-tie."""
    gap = first.gaps[position] if position < len(first.gaps) else None
    gap = None if gap is None or gap != gap else float(gap)  # NaN: unknown
    return _top(other, position), _top(first, position), gap, None if gap is None else gap < near_tie_gap


def align(completions: list[Completion], details: list[Detail], near_tie_gap: float) -> list[int]:
    """Fill each completion's split against the first (and its later flip), the top-k there, and its tokens over
    the window; returns the window's positions."""
    first = details[0]
    splits, flips = [], []
    for completion, detail in zip(completions[1:], details[1:], strict=True):
        completion.split, completion.split_kind, flip = _split(first, detail)
        if completion.split is None:
            continue
        splits.append(completion.split)
        (completion.top_at_split, completion.first_top_at_split, completion.gap_at_split,
         completion.near_tie) = _at(first, detail, completion.split, near_tie_gap)
        if flip is not None and flip != completion.split:
            completion.flip = Flip(flip, *_at(first, detail, flip, near_tie_gap))
            flips.append(flip)
    positions = window([*sorted(splits), *sorted(flips)] or [0], max(len(d.tokens) for d in details))
    for completion, detail in zip(completions, details, strict=True):
        completion.length = len(detail.tokens)
        completion.tokens = [detail.tokens[i] for i in positions if i < len(detail.tokens)]
        completion.logprobs = [None if (v := detail.logprobs[i]) is None or v != v else float(v)
                               for i in positions if i < len(detail.logprobs)]
    return positions


def window(marks: list[int], length: int) -> list[int]:
    """The positions shown: BEFORE before and AFTER after each mark (the splits, then the later flips, each
    earliest first) while they fit in WIDEST; a stretch of BEFORE or fewer between two is filled in."""
    shown: set[int] = set()
    for mark in marks:
        around = set(range(max(0, mark - BEFORE), min(length, mark + AFTER + 1)))
        if not shown or len(shown | around) <= WIDEST:
            shown |= around
    ordered = sorted(shown)
    for a, b in pairwise(ordered):
        if b - a - 1 <= BEFORE and len(shown) + b - a - 1 <= WIDEST:
            shown.update(range(a + 1, b))
    return sorted(shown)
