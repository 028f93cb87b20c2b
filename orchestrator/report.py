"""Reports a person reads (report.md) and a machine reads (report.json), from the record alone."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.compare import arms_summary, compare
from orchestrator.paths import RunPaths, atomic_write_text


def build(paths: RunPaths, study: str, run_id: str, baseline: str | None) -> dict[str, Any]:
    result = {"study": study, "run_id": run_id, "baseline": baseline, "arms": arms_summary(paths),
              **compare(paths, baseline)}
    atomic_write_text(paths.report_json, json.dumps(result, indent=2, sort_keys=True) + "\n")
    atomic_write_text(paths.report_md, markdown(result))
    return result


def _rate(cell: dict[str, Any]) -> str:
    if cell["distinct_signatures"] is None:
        return cell["signature_note"] or "n/a"
    bound = cell["upper_bound_95"]
    if cell["divergent"] == 0:
        return f"divergence rate <= {100 * bound:.1f}% (95%)"
    return f"{cell['divergent']} divergent in {cell['n']}; rate <= {100 * bound:.1f}% (95%)"


def cells_table(result: dict[str, Any]) -> str:
    lines = ["| arm | prompt | phase | n | distinct completions | distinct signatures | rate |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["cells"]:
        sigs = "n/a" if c["distinct_signatures"] is None else f"{c['distinct_signatures']} in {c['n']}"
        errors = f" (+{c['errors']} errors)" if c["errors"] else ""
        lines.append(f"| {c['arm']} | {c['prompt_id']} | {c['phase']} | {c['n']}{errors} | "
                     f"{c['distinct_completions']} in {c['n']} | {sigs} | {_rate(c)} |")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    out = [f"# Study `{result['study']}`, run `{result['run_id']}`", ""]
    out += ["## Arms", "", "| arm | status | image | image id | error |", "| --- | --- | --- | --- | --- |"]
    for arm in result["arms"]:
        out.append(f"| {arm['arm']} | {arm['status']} | {arm['image_ref']} | {(arm['image_id'] or '')[:19]} | "
                   f"{(arm['error'] or '').splitlines()[0] if arm['error'] else ''} |")
    out += ["", "## Repeatability per cell (warm requests)", "",
            "Signatures hash the top-k logprobs at 12 significant digits. A rate bound is one-sided 95% "
            "when nothing diverged, Clopper-Pearson otherwise. Repeatability says nothing of answer quality.",
            "", cells_table(result), ""]
    if result["cold"]:
        out += ["## Cold first request vs warm repeats", "", "| arm | prompt | phase | cold matches warm |",
                "| --- | --- | --- | --- |"]
        for c in result["cold"]:
            verdict = {True: "yes", False: "**no**", None: "not comparable"}[c["matches_warm"]]
            out.append(f"| {c['arm']} | {c['prompt_id']} | {c['phase']} | {verdict} |")
        out.append("")
    if result["schedules"]:
        out += ["## Schedules within an arm", "", "| arm | prompt | phase | vs phase | verdict |",
                "| --- | --- | --- | --- | --- |"]
        for c in result["schedules"]:
            out.append(f"| {c['arm']} | {c['prompt_id']} | {c['phase_a']} | {c['phase_b']} | {c['verdict']} |")
        out.append("")
    if result["pairs"]:
        out += [f"## Parity with the baseline `{result['baseline']}`", "",
                "| baseline | arm | prompt | phase | verdict |", "| --- | --- | --- | --- | --- |"]
        for p in result["pairs"]:
            out.append(f"| {p['arm_a']} | {p['arm_b']} | {p['prompt_id']} | {p['phase']} | {p['verdict']} |")
        out.append("")
    return "\n".join(out)
