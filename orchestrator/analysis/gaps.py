"""The top1 - top2 logprob gap at each generated position of one response: computed as the response is
recorded (run/send/sender.py), so the comparison reads it from the record instead of decoding the top-k lists
again; it tells a near-tie flip from a real defect. Plain Python, no numpy or pyarrow: the run imports it
before any engine answers."""

from __future__ import annotations

from typing import Any


def top_gap(top_logprobs_row: list[dict[str, Any]] | None) -> float | None:
    """top1 - top2 logprob at one position (entries in any order; the sampled token may repeat)."""
    if not top_logprobs_row:
        return None
    values = sorted({(e["token"], e["logprob"]) for e in top_logprobs_row}, key=lambda e: -e[1])
    return float(values[0][1] - values[1][1]) if len(values) > 1 else None


def top_gaps(top_logprobs: list[list[dict[str, Any]] | None] | None) -> list[float | None] | None:
    """Per generated position, top1 - top2: written with each response so the comparison need not
    decode the top-k lists again."""
    return None if top_logprobs is None else [top_gap(position) for position in top_logprobs]
