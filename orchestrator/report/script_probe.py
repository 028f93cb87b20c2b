"""RUN/script.md: a user's probe script's runs (`orchestrator probe --script`), one section per invocation: its
runs, then per digest name whether the repeats printed the same value, with the 95% bounds on the rate at which
they differ, and the verdict line ("identical" / "not identical"). docs/probes.md "Your own script"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.analysis.script_digests import Agreement, agreements
from orchestrator.report.table import fmt


def verdict(found: Sequence[Agreement], repeats: int) -> str:
    """The line that says whether the repeats printed the same digests."""
    if not found:
        return f"Digests across {repeats} repeats: none printed (no digest line in the stdout; docs/probes.md)"
    differ = [a for a in found if not a.identical]
    if not differ:
        return f"Digests across {repeats} repeats: identical ({len(found)} digest{'s' if len(found) > 1 else ''})"
    return (f"Digests across {repeats} repeats: not identical ({len(differ)} of {len(found)} digests differ: "
            f"{', '.join(a.name for a in differ[:8])}{' ...' if len(differ) > 8 else ''})")


def render_script(rows: Sequence[Mapping[str, Any]]) -> str:
    sections = []
    for run_id in dict.fromkeys(r["run_id"] for r in rows):
        sections.append(_section([r for r in rows if r["run_id"] == run_id]))
    return "\n".join(sections) or "## Your probe script\n\nNo script runs.\n"


def _section(rows: list[Mapping[str, Any]]) -> str:
    runs = sorted(rows, key=lambda r: int(r["repeat"]))
    head = runs[0]
    found = agreements(runs)
    contended = (f"contended by a busy {head['contend']} ({fmt(head.get('contend_matmuls'))} matmuls)"
                 if head.get("contend") else "alone on its device")
    lines = [f"## Your probe script: {head['script']}", "",
             f"`{head['script']}` (sha256 {str(head['script_sha256'])[:16]}) in {head['image']} "
             f"({str(head.get('image_id'))[:27]}), {len(runs)} runs, {contended}. Run {head['run_id']}.", "",
             verdict(found, len(runs)), "",
             "| repeat | exit status | seconds | digests printed | stderr (last line) |",
             "| ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        tail = [ln for ln in str(r.get("stderr_tail") or "").splitlines() if ln.strip()]
        last = tail[-1][:100].replace("|", "/") if tail else ""
        lines.append(f"| {r['repeat']} | {r['exit_code']} | {fmt(r.get('wall_s'))} | "
                     f"{len(r.get('digest_names') or [])} | {last} |")
    if found:
        lines += ["", "| digest | printed in | distinct | differ from repeat 1 | rate, 95% bounds |",
                  "| --- | ---: | ---: | ---: | --- |"]
        for a in found:
            lines.append(f"| {a.name} | {a.printed_in} of {a.repeats} | {a.distinct} | {a.divergent} of "
                         f"{max(a.repeats - 1, 1)} | [{fmt(a.lower_95)}, {fmt(a.upper_95)}] |")
    failed = [r for r in runs if r["exit_code"] != 0]
    if failed:
        lines += ["", f"The script exited non-zero in {len(failed)} of {len(runs)} runs: see stderr_tail in "
                  "the scripts table."]
    return "\n".join(lines) + "\n"
