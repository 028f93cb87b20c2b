"""How a value is written in a report: a table cell (`fmt`), a share, seconds, bytes, a ratio, a number to N
significant digits; a Markdown table; and the header line of a probe section."""

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
            + f"; {max(r.get('process') or 1 for r in rows)} process(es), seed {head.get('seed')}"
            + (f"; contended by a busy {head['contend']} ({head.get('contend_matmuls')} matmuls)"
               if head.get("contend") else ""))


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2g} %" if value < 0.1 else f"{100 * value:.0f} %"


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g} s" if value < 1 else f"{value:.1f} s"


def num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def size(value: float | None) -> str:
    """Bytes as a person reads them, never 0 for something not empty: 700 B, 512 KiB, 3.2 MiB, 80 MiB, 1.5 GiB."""
    if value is None:
        return "-"
    for limit, unit, digits, scale in ((2**10, "B", 0, 1), (2**20, "KiB", 0, 2**10), (10 * 2**20, "MiB", 1, 2**20),
                                       (2**30, "MiB", 0, 2**20)):
        if value < limit:
            return f"{value / scale:.{digits}f} {unit}"
    return f"{value / 2**30:.1f} GiB"


def compact(value: float) -> str:
    """A ratio or bound for a line a person reads: two decimals, but 2e+05 and <0.01 at the extremes."""
    return f"{value:.0e}" if value >= 1000 else "<0.01" if value < 0.01 else f"{value:.2f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]
