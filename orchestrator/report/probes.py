"""The kernel probes' sections of a report (RUN/probes.md and report.md): GEMM, one line per cell then the
summary; the ops probes (report/probe_ops.py)."""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.attribution import Attribution
from orchestrator.analysis.probes import summarize
from orchestrator.analysis.stats import POOLED_ASSUMPTION
from orchestrator.errors import counted
from orchestrator.record.identity import CODE, identity_kind
from orchestrator.report.probe_ops import render_ops
from orchestrator.report.table import fmt as _fmt
from orchestrator.report.table import probe_setup


def render_markdown(rows: list[dict[str, Any]]) -> str:
    """The probes sections of a report: GEMM rows, then the ops rows."""
    gemm = [r for r in rows if r.get("op") in (None, "gemm")]
    ops = [r for r in rows if r.get("op") not in (None, "gemm")]
    sections = ([render_gemm(gemm)] if gemm or not ops else []) + ([render_ops(ops)] if ops else [])
    return "\n".join(sections)


def render_gemm(rows: list[dict[str, Any]]) -> str:
    """The GEMM probes' section: one line per cell (process 1), then the summary."""
    if not rows:
        return "## Kernel probes (GEMM)\n\nNo probe rows.\n"
    s = summarize(rows)
    first = [r for r in rows if r.get("process") in (None, 1)]
    head = rows[0]
    lines = ["## Kernel probes (GEMM)", "",
             f"{probe_setup(rows)}; allocator perturbed: {_fmt(head.get('perturb_allocator'))}.", "",
             "| shape | arm | M | N | K | impl | repeats | distinct | upper bound 95% | processes agree | "
             "row 0 vs M=ref (bits equal / ulps) | vs float64 (ulps) | flagged | speed-up | unsupported |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | --- | ---: | --- |"]
    for r in first:
        if r.get("unsupported"):
            lines.append(f"| {r['shape']} | {r['arm']} | {r['M']} | {r['N']} | {r['K']} | - | - | - | - | - | - | - "
                         f"| - | - | {str(r['unsupported'])[:90].replace('|', '/')}... |")
            continue
        ref = f" (M={r['row0_ref_m']})" if r.get("row0_ref_m") not in (None, 1) else ""
        lines.append(
            f"| {r['shape']} | {r['arm']} | {r['M']} | {r['N']} | {r['K']} | {r.get('impl')} | {r['repeats']} "
            f"| {r['distinct_digests']} | {_fmt(r.get('upper_bound_95'))} | {_fmt(r.get('processes_agree'))} "
            f"| {_fmt(r.get('row0_bits_equal_m1'))} / {_fmt(r.get('row0_max_ulps_vs_m1'))}{ref} "
            f"| {_fmt(r.get('max_ulps_vs_float64'))} | {_fmt(r.get('flagged'))}"
            f"{' (negative control)' if r.get('negative_control') else ''} | {_fmt(r.get('speedup_per_call'))} | |")
    pooled = s.pooled_production
    lines += ["", f"- cells: {s.cells} ({s.ran} ran, {s.unsupported} unsupported); cells with more than "
              f"one digest: {s.cells_with_divergence}"]
    if pooled:
        lines.append(f"- pooled over the production cells: {pooled.divergent} divergent of {pooled.n} calls, "
                     f"upper bound 95% {pooled.upper_bound_95:.4g} ({POOLED_ASSUMPTION}; without it, only the "
                     "per-cell bounds hold)")
    lines += [f"- separate processes with the same seed disagree in: {s.processes_disagree or 'no cell'}",
              f"- production cells whose row 0 differs bitwise from the reference M: {s.row0_changes_with_m}",
              f"- production cells flagged against float64: {s.production_flagged or 'none'}",
              f"- negative control (row-major scale memory) flagged in {s.negative_control_flagged} of "
              f"{s.negative_controls} cells",
              f"- device-side compare vs hashing every call on the CPU, per call: speed-up "
              f"{_fmt(s.speedup_min)} to {_fmt(s.speedup_max)} (largest cell: {_fmt(s.speedup_largest_cell)})",
              ""]
    return "\n".join(lines)


def render_attribution(found: list[Attribution]) -> str:
    """A line per arm whose batched cells diverge while its sequential cells agree: the ops measured
    batch-variant where it ran (its image, or a process arm's code), as candidate causes."""
    return "\n".join(["## Candidate causes (kernel probes)", "", *map(attribution_line, found)]) + "\n"


def attribution_line(a: Attribution) -> str:
    """One arm's candidate causes (report.md, and `orchestrator show`)."""
    said = f"- arm `{a.arm}`: batched phase(s) {', '.join(a.batched_phases)} diverge while its sequential " \
           f"cells agree. "
    if a.candidates:
        ops = "; ".join(f"{v.op} `{v.shape}` arm {v.arm}" + (f", context {v.context}" if v.context else "")
                        + f" (row 0 changes at M {','.join(map(str, v.ms_row0_differs))})" for v in a.candidates)
        return said + f"Measured batch-variant in {_where(a)}: {ops}. A candidate cause, not proof: the probes " \
                      "ran synthetic inputs outside the engine, which may not call these kernels at these sizes."
    return said + f"None of the {counted(a.ops_probed, 'op')} probed in {_where(a)} was batch-variant: the cause " \
                  "lies outside what was probed."


def _where(a: Attribution) -> str:
    """'its image TAG (sha256:...)', or 'its code process:sha256:...' for a process arm (whose ref is free text)."""
    if a.identity is None:
        return f"its image {a.image}"
    if identity_kind(a.identity) == CODE:
        return f"its code {a.identity[:27]}"
    return f"its image {a.image} ({a.identity[:19]})"
