"""Cost against offered load in report.md and report.html: the frontier between repeatability and cost over an
arm's load points (or a sweep's series of them), and each series to saturation (saturation_md.py)."""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.cost import stays_correct
from orchestrator.analysis.cost_results import CostReport
from orchestrator.analysis.results import Cell
from orchestrator.report import saturation_md, svg
from orchestrator.report.table import markdown_table, num, pct

LOAD_KEYS = ("rate_per_s", "concurrency", "arrivals", "gamma_shape")  # a sweep over these draws one frontier


def sections(cost: CostReport | None, cells: list[Cell], sweep: dict[str, Any] | None = None) -> list[str]:
    """The frontier's table, then each series to saturation."""
    if cost is None:
        return []
    return [*frontier_table(cost, cells, series(sweep)), *saturation_md.section(cost, cells)]


def series(sweep: dict[str, Any] | None) -> dict[str, str]:
    """A sweep over load points: each job is an arm ('N/arm') with one load phase; the jobs that differ only in
    a load key (a rate, a concurrency) are one series, named by the arm and the other swept keys' values."""
    if not sweep:
        return {}
    swept = [k for k in sweep.get("swept_keys", []) if not any(word in k for word in LOAD_KEYS)]
    out = {}
    for job in sweep.get("jobs", {}).values():
        if job.get("arm"):
            others = ", ".join(f"{k}={job['overrides'].get(k, '')}" for k in swept)
            out[job["arm"]] = job["arm"].split("/", 1)[-1] + (f" ({others})" if others else "")
    return out


def frontier(cost: CostReport, cells: list[Cell], named: dict[str, str] | None = None
             ) -> dict[str, list[tuple[float, int, int, float, float, float | None]]]:
    """Per arm (or sweep series, `named`: arm -> series) with two load points or more: (offered rate, divergent,
    n, lower, upper, throughput) each."""
    out: dict[str, list[tuple[float, int, int, float, float, float | None]]] = {}
    for c in cost.phases:
        if c.offered_rate_per_s is None:
            continue
        k, n, low, high, _ = stays_correct(cells, c.arm, c.phase)
        out.setdefault((named or {}).get(c.arm, c.arm), []).append(
            (c.offered_rate_per_s, k, n, low, high, c.request_throughput_per_s.avg))
    return {arm: sorted(points) for arm, points in out.items() if len(points) > 1}


def frontier_table(cost: CostReport, cells: list[Cell], named: dict[str, str] | None = None) -> list[str]:
    points = frontier(cost, cells, named)
    if not points:
        return []
    out = ["## Divergence against offered load", "",
           "Each arm's probes' divergence rate (95 % bounds) at each offered rate, beside the throughput it "
           "reached: the frontier between repeatability and cost.", ""]
    return out + markdown_table(["arm", "offered (req/s)", "divergent", "rate (95 %)", "throughput (req/s)"], [
        [arm, num(rate), f"{k} of {n}", f"{pct(low)}-{pct(high)}", num(thr)]
        for arm, rows in points.items() for rate, k, n, low, high, thr in rows])


def charts(cost: CostReport | None, cells: list[Cell], sweep: dict[str, Any] | None = None) -> list[str]:
    """report.html's pictures of the frontier: one per arm (or sweep series) with two load points or more."""
    if cost is None:
        return []
    return [svg.frontier(f"{arm}: divergence against offered load, beside throughput",
                         [(rate, k / n if n else 0.0, low, high, thr) for rate, k, n, low, high, thr in points])
            for arm, points in frontier(cost, cells, series(sweep)).items()] + saturation_md.charts(cost, cells)
