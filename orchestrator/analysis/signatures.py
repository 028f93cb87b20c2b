"""Per-response signatures: short hashes of one response at a stated precision.

None means "not possible for this response" (the server returned no such data), never "equal".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

DIGEST_CHARS = 16


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def text_signature(text: str | None) -> str | None:
    return None if text is None else _digest(text)


def token_ids_signature(token_ids: Sequence[int] | None) -> str | None:
    return None if token_ids is None else _digest(",".join(map(str, token_ids)))


def top_logprobs_signature(top: Sequence[Sequence[dict[str, Any]] | None] | None,
                           significant_digits: int = 12) -> str | None:
    """The seed's signature: per position the top-k (token, logprob) in served order, logprobs at
    `significant_digits` significant digits, hashed."""
    if not top:
        return None
    lines = []
    for position in top:
        entries = position or []
        lines.append("\t".join(f"{e['token']}\x1f{e['logprob']:.{significant_digits}g}" for e in entries))
    return _digest("\n".join(lines))


def logprob_vector_signature(token_logprobs: Sequence[float | None] | None,
                             top: Sequence[Sequence[dict[str, Any]] | None] | None) -> str | None:
    """Every logprob value returned, at full float64 precision (repr), hashed."""
    if not token_logprobs and not top:
        return None
    values = [repr(v) for v in token_logprobs or []]
    for position in top or []:
        values.extend(repr(e["logprob"]) for e in position or [])
    return _digest(",".join(values))
