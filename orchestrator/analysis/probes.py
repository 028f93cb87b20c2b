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


def invariant(row: dict[str, Any]) -> bool | None:
    """A cell's verdict: one digest over its repeats, row 0 bitwise equal to the reference M's, and the
    processes agreeing where several ran. None: it did not run."""
    if row.get("unsupported") is not None or not row.get("repeats"):
        return None
    return (row["distinct_digests"] == 1 and row.get("row0_bits_equal_m1") is not False
            and row.get("processes_agree") is not False)


@dataclass
class OpVerdict:
    """One probe entry and arm over its M values (process 1)."""

    shape: str  # the preset's entry name (GEMM: the shape)
    op: str
    arm: str
    context: int | None
    ms_run: list[int]
    ms_unsupported: list[int]
    ms_repeat_variant: list[int]  # more than one digest over the fixed-M repeats
    ms_row0_differs: list[int]  # row 0 differs bitwise from the reference M
    max_row0_ulps: float | None
    expect_invariant: bool | None
    control: str | None
    unsupported_reason: str | None
    s_per_call_by_m: dict[int, float]

    @property
    def invariant(self) -> bool | None:
        return None if not self.ms_run else not (self.ms_repeat_variant or self.ms_row0_differs)

    @property
    def batch_variant(self) -> bool:
        return bool(self.ms_row0_differs)


def verdicts(rows: list[dict[str, Any]]) -> list[OpVerdict]:
    """Per (entry, arm), in the rows' order; processes that disagree count as repeat variance."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["shape"], r["arm"]), []).append(r)
    out = []
    for (shape, arm), mine in groups.items():
        first = [r for r in mine if r.get("process") in (None, 1)]
        ran = [r for r in first if invariant(r) is not None]
        ulps = [r["row0_max_ulps_vs_m1"] for r in ran if r.get("row0_max_ulps_vs_m1") is not None]
        out.append(OpVerdict(
            shape=shape, op=str(mine[0].get("op")), arm=arm, context=mine[0].get("context"),
            ms_run=[r["M"] for r in ran], ms_unsupported=[r["M"] for r in first if invariant(r) is None],
            ms_repeat_variant=sorted({r["M"] for r in mine if invariant(r) is not None and (
                r["distinct_digests"] > 1 or r.get("processes_agree") is False)}),
            ms_row0_differs=[r["M"] for r in ran if r.get("row0_bits_equal_m1") is False],
            max_row0_ulps=max(ulps, default=None), expect_invariant=mine[0].get("expect_invariant"),
            control=mine[0].get("control"),
            unsupported_reason=next((str(r["unsupported"]) for r in first if r.get("unsupported")), None),
            s_per_call_by_m={r["M"]: r["device_s_per_call"] for r in ran if r.get("device_s_per_call") is not None}))
    return out


def gate_failures(rows: list[dict[str, Any]]) -> list[str]:
    """A line per entry and arm that an ops preset marks `expect_invariant: true` and that was not, and per
    must-vary control that did not vary (the harness would be blind)."""
    failed = []
    for v in verdicts(rows):
        if v.expect_invariant and v.invariant is False:
            failed.append(f"{v.shape}/{v.arm} ({v.op}) is expected invariant and is not: repeats vary at M "
                          f"{v.ms_repeat_variant or 'none'}, row 0 differs from the reference M at M "
                          f"{v.ms_row0_differs or 'none'}")
        if v.control == "must_vary" and v.invariant is True:
            failed.append(f"{v.shape}/{v.arm}: the must-vary control did not vary at any M {v.ms_run}: the "
                          "probe cannot see variance here")
    return failed
