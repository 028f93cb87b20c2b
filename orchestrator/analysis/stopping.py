"""`protocol.stop_after_divergences`: when a cell has shown enough divergence to stop sending it requests.

One definition for the sender (which stops), `run --resume` (which must not send a stopped cell more) and the
report (which says which cells stopped): a request diverges when its signature differs from the cell's modal
signature so far, on the basis `analysis/compare.py` signs the cell on (the finest every response has: top
logprobs, else token ids, else text), the count it reports as `divergent`. Error rows and rows without a
signature count for nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.analysis.results import SIGNATURE_BASES

MEASURED = "measured"
SIGNATURE_COLUMNS = tuple(SIGNATURE_BASES.values())  # finest first


def divergent(counts: Counter[str]) -> int:
    """Requests whose signature is not the modal one."""
    return sum(counts.values()) - max(counts.values(), default=0)


class StopRule:
    """Per cell (prompt, phase) of one arm, the signatures seen on each basis; a cell stops once `k` requests
    diverged on the finest basis all of its responses have."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.cells: dict[tuple[str, str], dict[str, Counter[str]]] = {}
        self.rows: Counter[tuple[str, str]] = Counter()

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Responses rows (recorded, or just answered); only measured ones with a signature and no error count."""
        for row in rows:
            signed = [c for c in SIGNATURE_COLUMNS if row.get(c) is not None]
            if row.get("role") == MEASURED and row.get("error") is None and signed:
                key = (row["prompt_id"], row["phase"])
                self.rows[key] += 1
                bases = self.cells.setdefault(key, {column: Counter() for column in SIGNATURE_COLUMNS})
                for column in signed:
                    bases[column][row[column]] += 1

    def stopped(self, prompt_id: str, phase: str) -> bool:
        key = (prompt_id, phase)
        # the finest basis every observed row of the cell has (a cell with no row has no entry)
        counts = next((c for c in self.cells.get(key, {}).values() if c.total() == self.rows[key]), None)
        return counts is not None and divergent(counts) >= self.k


def describe(k: int) -> str:
    """The rule, as the report states it."""
    return (f"protocol.stop_after_divergences={k}: a cell's requests end once {k} diverged from its modal "
            "signature; a cell stopped so reports its divergence and a 95 % lower bound on the rate, no upper bound")
