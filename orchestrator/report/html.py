"""report.html: one self-contained file (no network) a person sends around: the verdict, the environment,
pictures (inline SVG, report/svg.py), then the Markdown report's tables, sortable by a click on a header.
Light and dark themes follow the reader's `prefers-color-scheme`."""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from orchestrator.analysis.results import Comparison, PairCheck
from orchestrator.config.noise_floor import copy_name
from orchestrator.report import explorer_html, frontier_md, locate, svg
from orchestrator.report.environment import markdown_section as environment_section
from orchestrator.report.markdown import details, opening, title, verdict

if TYPE_CHECKING:
    from orchestrator.report.model import StudyReport

ALIGNMENT_CELL = re.compile(r":?-{3,}:?")

STYLE = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--head:#f3f4f6;
--heat:#c2410c;--zero:#e5e7eb;--ok:#2da44e;--differ:#d1242f;--unknown:#8c959f;--p0:#0969da;--p1:#bf8700;
--p2:#8250df;--p3:#1a7f37;--box:#f6f8fa}
@media (prefers-color-scheme: dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#30363d;
--head:#161b22;--heat:#ff9b5e;--zero:#21262d;--ok:#3fb950;--differ:#f85149;--unknown:#6e7681;--p0:#58a6ff;
--p1:#d29922;--p2:#bc8cff;--p3:#56d364;--box:#161b22}}
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;background:var(--bg);
color:var(--fg)}
#verdict{border:2px solid var(--line);border-radius:8px;padding:0.5em 1.2em;background:var(--box)}
table{border-collapse:collapse;margin-bottom:1em;font-size:13px;display:block;max-width:100%;overflow-x:auto}
td,th{border:1px solid var(--line);padding:2px 6px;text-align:left;vertical-align:top}
th{background:var(--head);cursor:pointer;user-select:none}
th:focus-visible{outline:2px solid var(--p0);outline-offset:-2px}
th[data-dir=asc]::after{content:" \\25B2"} th[data-dir=desc]::after{content:" \\25BC"}
pre{background:var(--box);border:1px solid var(--line);padding:0.5em;overflow-x:auto;white-space:pre-wrap;
word-break:break-all}
svg.chart{max-width:100%;height:auto;display:block;margin:0.5em 0 1.5em}
svg.chart text{fill:var(--fg);font-size:11px;font-family:system-ui,sans-serif}
svg.chart text.caption{font-size:13px;font-weight:600}
svg.chart .heat{fill:var(--heat)} svg.chart .zero{fill:var(--zero)}
svg.chart .mark{fill:none;stroke:var(--fg);stroke-width:1.5}
svg.chart .axis{stroke:var(--line)} svg.chart .dot{stroke:var(--differ);stroke-width:2;fill:var(--bg)}
svg.chart .dot.tie{fill:var(--differ)} svg.chart .p0{fill:var(--p0)} svg.chart .p1{fill:var(--p1)}
svg.chart .p2{fill:var(--p2)} svg.chart .p3{fill:var(--p3)} svg.chart .tile.ok{fill:var(--ok)}
svg.chart .tile.differ{fill:var(--differ)} svg.chart .tile.unknown{fill:var(--unknown)}
svg.chart text.on-tile{fill:#fff}
p.item{margin:0.3em 0} p.item.l1{margin-left:1.5em} p.item.l2{margin-left:3em} p.item.l3{margin-left:4.5em}
"""

# Click a header, or focus it (Tab) and press Enter or Space: sort its table by that column (numbers as
# numbers), again: the other way. aria-sort tells a screen reader which column sorts and how.
SCRIPT = """
document.querySelectorAll("table").forEach(function (table) {
  var head = table.tHead && table.tHead.rows[0], body = table.tBodies[0];
  if (!head || !body) return;
  Array.prototype.forEach.call(head.cells, function (th, col) {
    th.tabIndex = 0;
    th.setAttribute("aria-sort", "none");
    th.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); th.click(); }
    });
    th.addEventListener("click", function () {
      var dir = th.dataset.dir === "asc" ? -1 : 1;
      Array.prototype.forEach.call(head.cells, function (c) {
        delete c.dataset.dir; c.setAttribute("aria-sort", "none");
      });
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      var key = function (row) {
        var text = row.cells[col] ? row.cells[col].textContent.trim() : "";
        var number = parseFloat(text);
        return /^[-+]?[0-9.]/.test(text) && !isNaN(number) ? number : text;
      };
      Array.prototype.slice.call(body.rows).sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x !== typeof y) return (typeof x === "number" ? -1 : 1) * dir;
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      }).forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def pictures(result: Comparison) -> list[str]:
    """The pictures that answer the questions faster than the tables: where the logprobs spread, where the
    first divergences fall, sequential vs concurrent distinct counts, A/B next to A/A."""
    label = {c.label: c for c in result.cells}
    out = []
    for key, axis in (("generated_spread", "generated position"), ("prompt_spread", "prompt position")):
        rows = [(f"{p.arm}/{p.prompt_id}/{p.phase}", getattr(p, key)) for p in result.positions if getattr(p, key)]
        marks = {name: cell.first_divergent_position for name, cell in label.items()
                 if cell.first_divergent_position is not None} if key == "generated_spread" else None
        out.append(svg.heatmap(f"Logprob spread per {axis} (max - min across a cell's requests)", rows, axis, marks))
    divergences = [(c.label, c.first_divergent_position, "tie" if c.near_tie else "open")
                   for c in result.cells if c.first_divergent_position is not None]
    divergences += [(f"{s.arm}/{s.prompt_id}: {s.phase_a} vs {s.phase_b}", s.first_divergent_position, "open")
                    for s in result.schedules if s.first_divergent_position is not None]
    divergences += [(f"{p.arm_b} vs {p.arm_a}/{p.prompt_id}/{p.phase}", p.first_divergent_position, "open")
                    for p in result.pairs if p.first_divergent_position is not None]
    out.append(svg.dots("Where the first divergences fall (generated tokens)", divergences, "generated token"))
    groups: dict[str, list[tuple[str, int, int]]] = {}
    for c in result.cells:
        if c.distinct_signatures is not None:
            groups.setdefault(f"{c.arm}/{c.prompt_id}", []).append((c.phase, c.distinct_signatures, c.n))
    phases = dict.fromkeys(phase for bars in groups.values() for phase, _, _ in bars)  # the study's, as named
    out.append(svg.grouped_bars(f"Distinct signatures per phase: {', '.join(phases)}", list(groups.items())))
    out.append(_ab_next_to_aa(result))
    return [p for p in out if p]


def _ab_next_to_aa(result: Comparison) -> str:
    """Per pair of arms and (prompt, phase): each arm against itself (A/A), then against the other (A/B)."""
    cells = {(c.arm, c.prompt_id, c.phase): c for c in result.cells}
    floor = {(p.arm_a, p.prompt_id, p.phase): p for p in result.pairs if p.arm_b == copy_name(p.arm_a)}
    charts = []
    pairs = list(dict.fromkeys((p.arm_a, p.arm_b) for p in result.pairs))
    for a, b in pairs:
        with_floor = b != copy_name(a) and any(key[0] == a for key in floor)
        rows = []
        for p in (p for p in result.pairs if (p.arm_a, p.arm_b) == (a, b)):
            tiles = []
            for arm in (a, b):
                cell = cells.get((arm, p.prompt_id, p.phase))
                if cell is None or cell.distinct_signatures is None:
                    tiles.append(("n/a", "unknown"))
                else:
                    tiles.append((f"{cell.distinct_signatures} in {cell.n}",
                                  "ok" if cell.distinct_signatures == 1 else "differ"))
            if with_floor:  # the noise floor: two starts of the baseline (study.noise_floor)
                aa = floor.get((a, p.prompt_id, p.phase))
                tiles.append(_verdict_tile(aa) if aa is not None else ("n/a", "unknown"))
            rows.append((f"{p.prompt_id}/{p.phase}", [*tiles, _verdict_tile(p)]))
        # an arm's own repeats are "within"; "A/A" is the noise floor, two starts of the baseline
        kind = "A/A" if b == copy_name(a) else "A/B"
        columns = [f"within {a}", f"within {b}", *([f"A/A {copy_name(a)} vs {a}"] if with_floor else []),
                   f"{kind} {b} vs {a}"]
        title = f"A/A (the noise floor): {b} vs {a}" if kind == "A/A" else f"A/B next to its arms' repeats: {b} vs {a}"
        charts.append(svg.matrix(title, columns, rows))
    return "".join(charts)


def _verdict_tile(pair: PairCheck) -> tuple[str, str]:
    where = f" at token {pair.first_divergent_position}" if pair.first_divergent_position is not None else ""
    kind = {"identical": "ok", "same distribution": "ok", "differ": "differ"}.get(pair.verdict, "unknown")
    return pair.verdict + where, kind


def markdown_to_html(text: str) -> list[str]:
    """The report's Markdown (headings, paragraphs, list items, pipe tables, fenced blocks) as HTML."""
    body: list[str] = []
    in_table = in_code = False
    for line in text.splitlines():
        if line.strip() == "```":  # a log excerpt or a command: kept verbatim
            body.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            body.append(html.escape(line))
            continue
        if line.startswith("|"):
            cells = [_inline(c.strip()) for c in line.strip("|").split("|")]
            if all(ALIGNMENT_CELL.fullmatch(c) for c in cells):  # |---|---:|: the header's underline
                continue
            if not in_table:
                body.append("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr></thead><tbody>")
                in_table = True
                continue
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</tbody></table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line.lstrip('# '))}</h{level}>")
        elif line.lstrip(" ").startswith("- "):  # a list item; two spaces more per nested level
            level = (len(line) - len(line.lstrip(" "))) // 2
            body.append(f"<p class='item{f' l{level}' if level else ''}'>&bull; {_inline(line.strip()[2:])}</p>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    if in_table:
        body.append("</tbody></table>")
    return body


def _inline(text: str) -> str:
    """`code` and **bold**, the only inline Markdown the report writes."""
    escaped = html.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def to_html(report: StudyReport) -> str:
    def section(name: str, lines: list[str]) -> str:
        return f'<section id="{name}">\n' + "\n".join(markdown_to_html("\n".join(lines))) + "\n</section>"

    figures = [*pictures(report.comparison), *frontier_md.charts(report.cost, report.comparison.cells, report.sweep)]
    body = [section("title", title(report)), section("opening", opening(report)), section("verdict", verdict(report)),
            section("environment", environment_section(report.environment)),
            '<section id="pictures">\n<h2>Pictures</h2>\n' + "\n".join(figures) + "\n</section>",
            explorer_html.section(report.comparison),
            *([section("inside", inside)] if (inside := locate.section(report.comparison.inside)) else []),
            section("details", details(report))]
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width'><title>{html.escape(report.study)}: "
            f"{html.escape(report.run_id)}</title><style>{STYLE}{explorer_html.STYLE}</style></head><body>\n"
            + "\n".join(body)
            + f"\n<script>{SCRIPT}</script>\n</body></html>\n")
