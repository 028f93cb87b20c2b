"""One way to write a value in a report table cell, and the header line of a probe section."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    """None -> "-", booleans -> yes/no, floats to `digits` significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def probe_setup(rows: list[dict[str, Any]]) -> str:
    """What the probe rows ran on: "torch X, device Y (GPU), image I; N process(es), seed S"."""
    head = rows[0]
    return (f"torch {head.get('torch')}, device {head.get('device')}"
            + (f" ({head['gpu']})" if head.get("gpu") else "")
            + (f", image {head['image']}" if head.get("image") else "")
            + f"; {max(r.get('process') or 1 for r in rows)} process(es), seed {head.get('seed')}")
