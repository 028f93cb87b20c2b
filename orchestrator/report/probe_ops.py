"""The ops probes' section of a report (decode/prefill attention, RMSNorm, sampling, grouped MoE GEMM, the
controls): a summary line per entry and arm, then a section per op with one line per M."""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.probes import OpVerdict, invariant, verdicts
from orchestrator.report.probe_ties import render_ties
from orchestrator.report.table import fmt as _fmt
from orchestrator.report.table import probe_setup


def _ms(ms: list[int]) -> str:
    return ",".join(map(str, ms)) if ms else "none"


def _expected(v: OpVerdict) -> str:
    if v.control:
        return f"{v.control.replace('_', '-')} control"
    return {True: "invariant", False: "no expectation", None: "-"}[v.expect_invariant]


def _verdict(v: OpVerdict) -> str:
    if v.invariant is None:
        return "unsupported"
    if v.control == "must_vary":
        return "varies (control ok)" if not v.invariant else "DID NOT VARY (control failed)"
    failed = v.invariant is False and (v.expect_invariant or v.control == "must_not_vary")
    return ("invariant" if v.invariant else "batch-variant" if v.batch_variant else "repeat-variant") + \
        (" (EXPECTED INVARIANT)" if failed else "")


def _cost(v: OpVerdict) -> str:
    if not v.s_per_call_by_m:
        return "-"
    lo, hi = min(v.s_per_call_by_m), max(v.s_per_call_by_m)
    return f"{v.s_per_call_by_m[lo] * 1e3:.3g} ms (M={lo}) / {v.s_per_call_by_m[hi] * 1e3:.3g} ms (M={hi})"


def render_ops(rows: list[dict[str, Any]]) -> str:
    """The section for rows whose op is not GEMM; process 1's cells in the per-op tables."""
    found = verdicts(rows)
    lines = ["## Kernel probes (ops)", "",
             f"{probe_setup(rows)}. A cell is invariant when its fixed-M repeats gave one digest, row 0 is bitwise "
             "equal to row 0 at the reference M (1, or the smallest that ran), and the processes agree.", "",
             "| entry | op | arm | context | M run | verdict | repeats vary at M | row 0 differs at M "
             "(max ulps) | expected | per call (smallest / largest M) |",
             "| --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- |"]
    for v in found:
        run = _ms(v.ms_run) + (f" (unsupported: {_ms(v.ms_unsupported)})" if v.ms_unsupported else "")
        lines.append(f"| {v.shape} | {v.op} | {v.arm} | {_fmt(v.context)} | {run} | {_verdict(v)} "
                     f"| {_ms(v.ms_repeat_variant)} | {_ms(v.ms_row0_differs)} ({_fmt(v.max_row0_ulps)}) "
                     f"| {_expected(v)} | {_cost(v)} |")
    for op in dict.fromkeys(r["op"] for r in rows):
        lines += ["", f"### {op}", "", "| entry | arm | M | repeats | distinct | processes agree | row 0 = ref M "
                  "(ulps) | per call | unsupported |", "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | --- |"]
        for r in rows:
            if r["op"] != op or r.get("process") not in (None, 1):
                continue
            if invariant(r) is None:
                reason = str(r.get("unsupported") or "")[:120].replace("|", "/").replace("\n", " ")
                lines.append(f"| {r['shape']} | {r['arm']} | {r['M']} | - | - | - | - | - | {reason} |")
                continue
            per_call = r.get("device_s_per_call")
            lines.append(f"| {r['shape']} | {r['arm']} | {r['M']} | {r['repeats']} | {r['distinct_digests']} "
                         f"| {_fmt(r.get('processes_agree'))} | {_fmt(r.get('row0_bits_equal_m1'))} "
                         f"({_fmt(r.get('row0_max_ulps_vs_m1'))}, M={r.get('row0_ref_m')}) "
                         f"| {'-' if per_call is None else f'{per_call * 1e3:.3g} ms'} | |")
    return "\n".join(lines + render_ties(rows)) + "\n"
