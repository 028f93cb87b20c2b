"""report.html: self-contained (no network), the Markdown report's tables as HTML tables, plots inlined as PNG."""

from __future__ import annotations

import base64
import html
import io
import re
from typing import TYPE_CHECKING, Any

from orchestrator.analysis.results import Comparison
from orchestrator.report.markdown import markdown

if TYPE_CHECKING:
    from orchestrator.report.model import StudyReport

ALIGNMENT_CELL = re.compile(r":?-{3,}:?")


def _plots(result: Comparison) -> list[str]:
    """PNG images (base64) of per-position spread and distinct counts; [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    images = []
    for key, label in (("prompt_spread", "prompt position"), ("generated_spread", "generated position")):
        series = [p for p in result.positions if getattr(p, key)]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(9, 3.2))
        for p in series:
            values = [float("nan") if v is None else v for v in getattr(p, key)]
            ax.plot(values, label=f"{p.arm} / {p.prompt_id} / {p.phase}", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel("logprob spread (max - min)")
        ax.legend(fontsize=6, loc="upper left")
        images.append(_png(fig, plt))
    cells = result.cells
    if cells:
        fig, ax = plt.subplots(figsize=(9, 0.3 * len(cells) + 1))
        labels = [f"{c.arm} / {c.prompt_id} / {c.phase}" for c in cells]
        ax.barh(labels, [c.distinct_signatures or 0 for c in cells])
        ax.set_xlabel("distinct signatures")
        ax.tick_params(axis="y", labelsize=6)
        images.append(_png(fig, plt))
    return images


def _png(fig: Any, plt: Any) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def markdown_to_html(text: str) -> list[str]:
    """The report's Markdown (headings, paragraphs, pipe tables, fenced blocks) as HTML elements."""
    body: list[str] = []
    in_table = in_code = False
    for line in text.splitlines():
        if line.strip() == "```":  # a log excerpt: kept verbatim
            body.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            body.append(html.escape(line))
            continue
        if line.startswith("|"):
            cells = [html.escape(c.strip()).replace("**", "") for c in line.strip("|").split("|")]
            if all(ALIGNMENT_CELL.fullmatch(c) for c in cells):  # |---|---:|: the header's underline
                continue
            if not in_table:
                body.append("<table>")
                in_table = True
            tag = "th" if body[-1] == "<table>" else "td"
            body.append("<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            body.append(f"<p>{html.escape(line).replace('`', '')}</p>")
    if in_table:
        body.append("</table>")
    return body


def to_html(report: StudyReport) -> str:
    """Self-contained: the Markdown tables as HTML tables, plots inlined as PNG."""
    body = markdown_to_html(markdown(report))
    plots = _plots(report.comparison)
    body += ["<h2>Plots</h2>", *(f'<img alt="plot" src="data:image/png;base64,{p}">' for p in plots)] if plots \
        else ["<p>(plots need matplotlib: pip install 'orchestrator[report]')</p>"]
    style = ("body{font-family:sans-serif;margin:2em;max-width:1200px} table{border-collapse:collapse;"
             "margin-bottom:1em;font-size:13px} td,th{border:1px solid #ccc;padding:2px 6px} img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(report.study)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
