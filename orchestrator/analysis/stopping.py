"""`protocol.stop_after_divergences`: when a cell has shown enough divergence to stop sending it requests.

One definition for the sender (which stops), `run --resume` (which must not send a stopped cell more) and the
report (which says which cells stopped): a request diverges when its top-logprob signature differs from the
cell's modal signature so far, the count `analysis/compare.py` reports as `divergent`. Error rows and rows
without a signature count for nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

MEASURED = "measured"


def divergent(counts: Counter[str]) -> int:
    """Requests whose signature is not the modal one."""
    return sum(counts.values()) - max(counts.values(), default=0)


class StopRule:
    """Per cell (prompt, phase) of one arm, the signatures seen; a cell stops once `k` requests diverged."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.cells: dict[tuple[str, str], Counter[str]] = {}

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Responses rows (recorded, or just answered); only measured ones with a signature and no error count."""
        for row in rows:
            if row.get("role") == MEASURED and row.get("error") is None and row.get("sig_top_logprobs") is not None:
                self.cells.setdefault((row["prompt_id"], row["phase"]), Counter())[row["sig_top_logprobs"]] += 1

    def stopped(self, prompt_id: str, phase: str) -> bool:
        counts = self.cells.get((prompt_id, phase))
        return counts is not None and divergent(counts) >= self.k


def describe(k: int) -> str:
    """The rule, as the report states it."""
    return (f"protocol.stop_after_divergences={k}: a cell's requests end once {k} diverged from its modal "
            "signature; a cell stopped so reports its divergence and a 95 % lower bound on the rate, no upper bound")
