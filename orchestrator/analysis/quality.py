"""Answer quality, kept apart from repeatability: an identical wrong answer is still wrong.

A prompt may carry an expectation: `exact`, `contains` or `regex` on the completion text, and/or a
script check: the share of non-space characters whose Unicode name starts with the script's name
(THAI, ARABIC, CYRILLIC, ...) must reach `min_share`.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import pyarrow as pa


def script_share(text: str, script: str) -> float:
    letters = [c for c in text if not c.isspace()]
    if not letters:
        return 0.0
    prefix = script.upper()
    return sum(unicodedata.name(c, "").startswith(prefix) for c in letters) / len(letters)


def passes(text: str | None, expectation: dict[str, Any]) -> bool:
    if text is None:
        return False
    checks = []
    if expectation.get("exact") is not None:
        checks.append(text.strip() == str(expectation["exact"]).strip())
    if expectation.get("contains") is not None:
        checks.append(str(expectation["contains"]) in text)
    if expectation.get("regex") is not None:
        checks.append(re.search(str(expectation["regex"]), text) is not None)
    if expectation.get("script") is not None:
        checks.append(script_share(text, str(expectation["script"])) >= float(expectation.get("min_share", 0.9)))
    return all(checks)


def describe(expectation: dict[str, Any]) -> str:
    parts = [f"{k} {expectation[k]!r}" for k in ("exact", "contains", "regex") if expectation.get(k) is not None]
    if expectation.get("script") is not None:
        parts.append(f"script {expectation['script']} >= {expectation.get('min_share', 0.9)}")
    return " and ".join(parts)


def pass_share(texts: pa.ChunkedArray, expectation: dict[str, Any] | None) -> tuple[float | None, str]:
    """`texts` as the record holds them: made Python strings only when there is something to check."""
    if not expectation or not describe(expectation):
        return None, ""
    values = texts.to_pylist()
    return sum(passes(t, expectation) for t in values) / len(values) if values else None, describe(expectation)
