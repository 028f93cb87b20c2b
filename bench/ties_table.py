"""The top-k tie grid's figures from its raw outputs (docs/probes.md, "Top-k under ties"): the cells and
processes, whether any row changed its set or order across repeats or from the row alone, and per expert
count, dtype, k and tie share the rows whose set differs from the stable control's, of the tied rows, at one M.

    python3 bench/ties_table.py docs/probe-results/cpu-2026-12-06/ties_grid --m 1024

Stdlib only: it reads the probe's JSON lines (probes-ops-raw-*.jsonl), as `orchestrator probe` wrote them.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

CHANGES = ("set_differs_repeats", "order_differs_repeats", "set_differs_alone", "order_differs_alone")
COLUMNS = [(2, 0.01), (2, 0.2), (2, 0.5), (8, 0.01), (8, 0.2), (8, 0.5)]


def cells_of(run: Path) -> list[dict[str, Any]]:
    paths = sorted(run.glob("probes-ops-raw-*.jsonl"))
    if not paths:
        raise SystemExit(f"no probes-ops-raw-*.jsonl in {run}: pass the probe's --out folder")
    rows = [json.loads(line) for path in paths for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("{")]
    return [r for r in rows if r.get("kind") == "cell"]


def summary(cells: list[dict[str, Any]]) -> list[str]:
    ties = [c for c in cells if c["op"] == "topk_ties" and not c.get("unsupported")]
    firsts: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for c in cells:
        firsts[(c["shape"], c["arm"], c["M"])].add(str(c.get("first_digest")))
    changed = {k: sum(int(c[k] or 0) for c in ties) for k in CHANGES}
    return [f"tie cells: {len(ties)}; unsupported cells: {sum(bool(c.get('unsupported')) for c in cells)}",
            f"rows changed, summed over the tie cells: {changed}",
            "cells with more than one digest: "
            f"{[(c['shape'], c['arm'], c['M']) for c in cells if (c.get('distinct_digests') or 1) > 1] or 'none'}",
            f"cells whose row 0 differs from M=1: "
            f"{[(c['shape'], c['arm'], c['M']) for c in cells if c.get('row0_bits_equal_m1') is False] or 'none'}",
            f"(entry, arm, M) where the processes disagree: {sum(len(v) > 1 for v in firsts.values())} "
            f"of {len(firsts)}"]


def vs_stable(cells: list[dict[str, Any]], m: int, arm: str) -> list[str]:
    table: dict[tuple[int, str], dict[tuple[int, float], str]] = defaultdict(dict)
    for c in cells:
        if c["op"] == "topk_ties" and c["M"] == m and c["arm"] == arm and c.get("process", 1) in (None, 1) \
                and not c.get("unsupported"):
            p = json.loads(c["params"])
            table[(p["experts"], p["dtype"])][(p["top_k"], p["tie_share"])] = \
                f"{c['set_differs_stable']} of {c['tie_rows']}"
    head = " | ".join(f"k {k}, {share:.0%} tied" for k, share in COLUMNS)
    lines = [f"rows whose set differs from stable_sort's, of the tied rows ({arm}, M={m}):",
             f"| experts | dtype | {head} |", "| ---: | --- |" + " ---: |" * len(COLUMNS)]
    for (experts, dtype), row in sorted(table.items()):
        lines.append(f"| {experts} | {dtype} | " + " | ".join(row.get(col, "-") for col in COLUMNS) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the folder holding probes-ops-raw-*.jsonl")
    parser.add_argument("--m", type=int, default=1024, help="the M of the vs-stable table")
    parser.add_argument("--arm", default="topk_sorted", choices=("topk_sorted", "topk_unsorted"))
    args = parser.parse_args()
    cells = cells_of(args.run)
    print("\n".join([*summary(cells), "", *vs_stable(cells, args.m, args.arm)]))


if __name__ == "__main__":
    main()
