"""Where completions split when the server returned only their text (no tokens, no logprobs): the first
differing character of each against the first completion, and a bounded window of characters from the earliest
split (the prefix they all share shown once before it); a branch that splits far past that window starts its own
a little before its split."""

from __future__ import annotations

from orchestrator.analysis.results import Completion

PREFIX_CHARS = 60  # of the shared prefix, shown once
WIDEST_CHARS = 160  # of each completion from its window's start
LEAD_CHARS = 100  # a split further than this past the window's start gets a window of its own ...
OWN_LEAD_CHARS = 40  # ... starting this many characters before it


def _shared(first: str, other: str) -> int:
    """How many leading characters the two have in common."""
    return next((i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a != b), min(len(first), len(other)))


def align(completions: list[Completion], texts: list[str]) -> tuple[int, str]:
    """Fill each completion's split (a character offset) against the first and its text over its window;
    returns the earliest split and the end of the prefix shared by all before it."""
    first = texts[0]
    for completion, text in zip(completions[1:], texts[1:], strict=True):
        if text != first:
            completion.split, completion.split_kind = _shared(first, text), "character"
    splits = [c.split for c in completions if c.split is not None]
    start = min(splits) if splits else 0
    for completion, text in zip(completions, texts, strict=True):
        far = completion.split is not None and completion.split - start > LEAD_CHARS
        completion.text_start = completion.split - OWN_LEAD_CHARS if far and completion.split else start
        completion.length = len(text)
        completion.text = text[completion.text_start:completion.text_start + WIDEST_CHARS]
    return start, first[max(0, start - PREFIX_CHARS):start]
