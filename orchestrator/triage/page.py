"""The findings page, written into the triage dir as the reports are: findings.md, findings.html (one file,
report.html's style, no network) and findings.json, the verdict first; then the findings ranked, each with its
evidence, what it rules out, what its fix costs and the command that re-runs its step; then every step with its
outcome and run dir."""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path

from orchestrator.record.paths import atomic_write_text
from orchestrator.report.html import STYLE, markdown_to_html
from orchestrator.report.table import markdown_table
from orchestrator.triage.findings import Findings
from orchestrator.triage.state import SKIPPED
from orchestrator.triage.steps import AS_GIVEN


def to_markdown(found: Findings) -> str:
    lines = [f"# Triage of arm `{found.arm}`", "", f"**{found.verdict}**", ""]
    if found.findings:
        lines += ["## Findings, most likely cause first", ""]
    for f in found.findings:
        lines += [f"### {f.rank}. {f.title}", "", f"- kind: {f.kind}", "- evidence:",
                  *(f"  - {e}" for e in f.evidence), f"- rules out: {f.rules_out or '-'}",
                  f"- cost of the fix: {f.fix_cost}", f"- re-run this step: `{f.command}`", ""]
    rows = []
    for step in found.steps:
        k, n = step.divergent(AS_GIVEN)
        what = step.reason if step.status == SKIPPED else "; ".join(step.answer) if step.answer else ", ".join([
            step.shown(), f"{k} divergent of {n}",
            *(["the cold first request unlike the warm ones"] if any(
                d.startswith(f"{AS_GIVEN}/") for d in step.cold_differs) else []),
            *(["sequential unlike concurrent"] if any(d.startswith(f"{AS_GIVEN}/") for d in step.schedule_differs)
              else []),
            *([f"{step.starts_ready} of {step.starts} started"] if step.starts > 1 else []),
            *([f"{step.signatures_across_starts or 1} distinct first answer(s) a prompt across starts"]
              if step.starts > 1 and step.starts_ready else [])])
        rows.append([step.name, step.status, what, str(step.requests), step.run_dir or "-"])
    if found.load_cost:
        lines += ["## What the arm costs at its load point", "", *(f"- {line}" for line in found.load_cost), ""]
    lines += ["## Steps", "", *markdown_table(["step", "status", "as given", "requests", "run dir"], rows), "",
              "## Not run by triage", "", *(f"- {what}" for what in found.not_run), ""]
    return "\n".join(lines)


def to_html(found: Findings) -> str:
    body = "\n".join(markdown_to_html(to_markdown(found)))
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Triage of "
            f"{html.escape(found.arm)}</title><style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def to_json(found: Findings) -> str:
    return json.dumps({"verdict": found.verdict, **asdict(found)}, indent=2, sort_keys=False) + "\n"


def write(found: Findings, out: Path) -> Path:
    """findings.md, findings.html, findings.json in `out`; returns the Markdown's path."""
    atomic_write_text(out / "findings.md", to_markdown(found))
    atomic_write_text(out / "findings.html", to_html(found))
    atomic_write_text(out / "findings.json", to_json(found))
    return out / "findings.md"
