"""matrix.html: the support matrix as one self-contained file (no network): a table with a filter input per
column (plain JS: a row stays shown while every column's text holds its filter's text), report.html's style."""

from __future__ import annotations

import html

from orchestrator.report.html import STYLE

SCRIPT = """
const inputs=[...document.querySelectorAll('thead input')];
const rows=[...document.querySelectorAll('tbody tr')];
function apply(){const wanted=inputs.map(i=>i.value.trim().toLowerCase());let shown=0;
for(const r of rows){const ok=wanted.every((w,i)=>!w||r.cells[i].textContent.toLowerCase().includes(w));
r.hidden=!ok;if(ok)shown++;}document.getElementById('shown').textContent=shown;}
inputs.forEach(i=>i.addEventListener('input',apply));apply();
"""


def _cell(column: str, value: str) -> str:
    if column == "evidence":
        return f'<td><a href="{html.escape(value)}">{html.escape(value)}</a></td>'
    return f"<td>{html.escape(value)}</td>"


def to_html(columns: tuple[str, ...], flat: list[dict[str, str]]) -> str:
    """The page: a header row of names, a row of filters, a row per cell and run."""
    names = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    filters = "".join(f'<th><input aria-label="filter {html.escape(c)}" data-column="{html.escape(c)}" '
                      f'placeholder="filter"></th>' for c in columns)
    body = "\n".join("<tr>" + "".join(_cell(c, row[c]) for c in columns) + "</tr>" for row in flat)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Support matrix</title>"
            f"<style>{STYLE}\ninput{{width:100%;min-width:4em}}</style></head><body>\n<h1>Support matrix</h1>\n"
            f"<p><span id=\"shown\">{len(flat)}</span> of {len(flat)} rows shown (a row per cell and run; "
            "type in a column's box to filter).</p>\n"
            f"<table id=\"matrix\"><thead><tr>{names}</tr><tr>{filters}</tr></thead>\n<tbody>\n{body}\n</tbody>"
            f"</table>\n<script>{SCRIPT}</script>\n</body></html>\n")
