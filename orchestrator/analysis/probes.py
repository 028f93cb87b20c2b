"""Kernel probe rows (the `probes` table) summed up: pooled bound with its assumption, cross-process
agreement, flags, the device-compare speed-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.stats import PooledRate, pooled_bound

Cell = tuple[str, str, int]  # shape, arm, M


@dataclass
class ProbeSummary:
    cells: int
    ran: int
    unsupported: int
    cells_with_divergence: int  # cells with more than one digest over their repeats
    pooled_production: PooledRate | None  # over the production cells (not the negative control)
    processes_disagree: list[Cell]  # separate processes with the same seed gave different first outputs
    row0_changes_with_m: int  # production cells whose row 0 differs bitwise from the reference M
    production_flagged: list[Cell]  # flagged against float64
    negative_control_flagged: int
    negative_controls: int
    speedup_min: float | None
    speedup_max: float | None
    speedup_largest_cell: float | None


def summarize(rows: list[dict[str, Any]]) -> ProbeSummary:
    ran = [r for r in rows if r.get("unsupported") is None and r.get("repeats")]
    production = [r for r in ran if not r.get("negative_control")]
    speedups = [r["speedup_per_call"] for r in ran if r.get("speedup_per_call")]
    largest = max(ran, key=lambda r: (r["M"] * r["N"], r.get("speedup_per_call") or 0), default=None)
    return ProbeSummary(
        cells=len(rows), ran=len(ran), unsupported=len(rows) - len(ran),
        cells_with_divergence=sum(r["distinct_digests"] > 1 for r in ran),
        pooled_production=pooled_bound([r["divergent_repeats"] for r in production],
                                       [r["repeats"] for r in production]) if production else None,
        processes_disagree=sorted({(r["shape"], r["arm"], r["M"]) for r in ran if r.get("processes_agree") is False}),
        row0_changes_with_m=sum(r.get("row0_bits_equal_m1") is False for r in production),
        production_flagged=sorted({(r["shape"], r["arm"], r["M"]) for r in production if r.get("flagged")}),
        negative_control_flagged=sum(bool(r.get("flagged")) for r in ran if r.get("negative_control")),
        negative_controls=sum(bool(r.get("negative_control")) for r in ran),
        speedup_min=min(speedups, default=None), speedup_max=max(speedups, default=None),
        speedup_largest_cell=(largest or {}).get("speedup_per_call"),
    )
