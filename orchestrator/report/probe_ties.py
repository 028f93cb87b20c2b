"""The top-k tie probe's table in a report (op `topk_ties`, orchestrator/probes/ops_ties.py): per entry, arm and
M, the rows with a tie at the k-th value and the rows whose selected set or order changed, each a count of the
cell's M rows."""

from __future__ import annotations

import json
from typing import Any

TIES_OP = "topk_ties"


def _rows(n: Any, m: int) -> str:
    return "-" if n is None else f"{n} ({100 * n / m:.3g}%)" if n else "0"


def render_ties(rows: list[dict[str, Any]]) -> list[str]:
    """Lines of the section (none when no row is of the tie probe); process 1's cells."""
    mine = [r for r in rows if r.get("op") == TIES_OP and r.get("process") in (None, 1)
            and r.get("unsupported") is None and r.get("tie_rows") is not None]
    if not mine:
        return []
    lines = ["", "### top-k under ties", "",
             "Rows of each cell (of M): with a tie at the k-th value; whose selected set differs across the repeats, "
             "from the row selected alone (M=1), from the stable-sort control (ties to the lowest index); whose "
             "order differs across the repeats, from the row alone.", "",
             "| entry | arm | experts | k | tie share | dtype | M | tie rows | set: repeats | set: alone | "
             "set: vs stable | order: repeats | order: alone |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in mine:
        p, m = json.loads(r.get("params") or "{}"), int(r["M"])
        lines.append(f"| {r['shape']} | {r['arm']} | {p.get('experts')} | {p.get('top_k')} | {p.get('tie_share')} "
                     f"| {r.get('dtype')} | {m} | {_rows(r['tie_rows'], m)} | {_rows(r.get('set_differs_repeats'), m)} "
                     f"| {_rows(r.get('set_differs_alone'), m)} | {_rows(r.get('set_differs_stable'), m)} "
                     f"| {_rows(r.get('order_differs_repeats'), m)} | {_rows(r.get('order_differs_alone'), m)} |")
    return lines
