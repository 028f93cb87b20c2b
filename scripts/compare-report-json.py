#!/usr/bin/env python3
"""Compare two report.json files apart from times and ids: the check that a refactor changed no result.

    python scripts/compare-report-json.py BEFORE/report.json AFTER/report.json

Exit 0 when they agree, 1 with the differing paths listed. Ignored: keys naming times, ids, paths and
send spreads (they differ between any two runs), and the guard's observed env (hostnames).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

VOLATILE = re.compile(r"(_ns|_ms|_s|run_id|container_id|image_id|matrix_key|hostname|HOSTNAME|spread.*|"
                      r"timestamp|created|elapsed.*|path|dir|digests?)$", re.IGNORECASE)


def strip(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        return {k: strip(v, f"{path}.{k}") for k, v in sorted(node.items()) if not VOLATILE.search(k)}
    if isinstance(node, list):
        return [strip(v, f"{path}[{i}]") for i, v in enumerate(node)]
    return node


def diff(a: Any, b: Any, path: str = "$") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in {'before' if k in a else 'after'}" for k in sorted(set(a) ^ set(b))]
        for key in sorted(set(a) & set(b)):
            out += diff(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [line for i, (x, y) in enumerate(zip(a, b, strict=True)) for line in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    before, after = (strip(json.loads(Path(p).read_text(encoding="utf-8"))) for p in argv)
    problems = diff(before, after)
    for line in problems:
        print(line)
    print(f"{'differ' if problems else 'same'}: {len(problems)} difference(s) apart from times and ids")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
