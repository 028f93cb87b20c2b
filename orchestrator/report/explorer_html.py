"""report.html's explorer: one <details> per divergent cell (and per A/B pair that differs), opened from the
keyboard like any disclosure (Tab to its summary, Enter or Space); inside, the completions aligned on the first
one with the split token (and a later token flip) marked, a small SVG of each completion's chosen-token logprob
around them with a legend, who took each branch, and the top-k of both at the split and the flip. A cell signed
on text: its completions' characters from the split, and why there is no chart or top-k."""

from __future__ import annotations

from html import escape

from orchestrator.analysis.results import Comparison, Completion, Explored, TopEntry
from orchestrator.report.explorer_md import (
    MARKS,
    TEXT_SIGNED,
    forks,
    mark,
    more_branches,
    summary,
    text_parts,
    text_shown,
    token_text,
    who,
    window,
)
from orchestrator.report.locate import SECTION, inside_lines

STYLE = """
details.explore{border:1px solid var(--line);border-radius:6px;margin:0.4em 0;padding:0.2em 0.8em;
background:var(--box)}
details.explore>summary{cursor:pointer;font-weight:600;padding:0.2em 0}
details.explore>summary:focus-visible{outline:2px solid var(--p0);outline-offset:2px}
table.tokens td{font-family:ui-monospace,monospace;white-space:pre;text-align:center}
table.tokens td.name{font-family:system-ui,sans-serif;text-align:left}
table.tokens tr.branch td{color:var(--muted)} table.tokens tr.branch td.differ{color:var(--differ)}
table.tokens tr.branch td.split{background:var(--differ);color:#fff;font-weight:700}
table.tokens tr.branch td.flip{outline:2px solid var(--differ);outline-offset:-2px;color:var(--differ);
font-weight:700}
table.tokens th.at-split{border-bottom:3px solid var(--differ)}
.topk tr.differ td{color:var(--differ);font-weight:600}
.topk{display:inline-block;vertical-align:top;margin-right:1.5em}
svg.spark{display:block;margin:0.4em 0} svg.spark text{fill:var(--fg);font-size:10px;font-family:system-ui}
svg.spark .axis{stroke:var(--line)} svg.spark .split{stroke:var(--differ);stroke-dasharray:3 2}
svg.spark .flip{stroke:var(--differ);stroke-dasharray:1 2}
svg.spark polyline,svg.spark line.key{fill:none;stroke-width:1.5}
svg.spark .s0{stroke:var(--p0)} svg.spark .s1{stroke:var(--differ)}
svg.spark .s2{stroke:var(--p1)} svg.spark .s3{stroke:var(--p2)} svg.spark .s4{stroke:var(--p3)}
table.textsplit td.text{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
table.textsplit tr.branch td.text{color:var(--muted)}
table.textsplit span.split{color:var(--differ);font-weight:600}
table.textsplit span.split b{background:var(--differ);color:#fff}
"""

SPARK_W, SPARK_H, PAD = 520, 126, 34
KEY_CHAR_W = 6  # about one character of the legend's 10px text


def sparkline(explored: Explored) -> str:
    """The chosen token's logprob of each completion over the window (a line per run of positions, broken where
    the window skips some), a dashed line at each split, a dotted one at each later token flip, and a legend."""
    values = [v for c in explored.completions for v in c.logprobs if v is not None]
    width = max(len(c.logprobs) for c in explored.completions)
    if not values or width < 2:
        return ""
    low, high = min(values), max(max(values), min(values) + 1e-9)
    plot_w, plot_h = SPARK_W - PAD - 8, SPARK_H - 46
    at = window(explored)
    offset_of = {position: offset for offset, position in (a for a in at if a is not None)}

    def x(offset: int) -> float:
        return PAD + plot_w * offset / (width - 1)

    def y(value: float) -> float:
        return 8 + plot_h * (high - value) / (high - low)

    runs = _runs(explored.window_positions)
    label = "chosen-token logprob, positions " + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
    body = [f'<line class="axis" x1="{PAD}" x2="{PAD + plot_w}" y1="{8 + plot_h}" y2="{8 + plot_h}"/>',
            f'<text x="{PAD - 3}" y="12" text-anchor="end">{high:.2g}</text>',
            f'<text x="{PAD - 3}" y="{8 + plot_h}" text-anchor="end">{low:.2g}</text>',
            f'<text x="{PAD}" y="{SPARK_H - 22}">{escape(label)}</text>']
    for before, gap, after in zip(at, at[1:], at[2:], strict=False):
        if gap is None and before is not None and after is not None:  # the window skips positions here
            body.append(f'<text x="{(x(before[0]) + x(after[0])) / 2:.1f}" y="{12 + plot_h}" '
                        'text-anchor="middle">…</text>')
    for c in explored.completions:
        for position, kind, what in ((c.split, "split", "splits"), (c.flip and c.flip.position, "flip",
                                                                      "takes another token")):
            if position is not None and position in offset_of:
                spot = x(offset_of[position])
                body.append(f'<line class="{kind}" x1="{spot:.1f}" x2="{spot:.1f}" y1="4" y2="{8 + plot_h}">'
                            f"<title>{escape(c.name)} {what} at token {position}</title></line>")
    key_x = float(PAD)
    for i, c in enumerate(explored.completions):
        for run in _offset_runs(at, len(c.logprobs)):
            points = " ".join(f"{x(o):.1f},{y(v):.1f}" for o in run if (v := c.logprobs[o]) is not None)
            body.append(f'<polyline class="s{min(i, 4)}" points="{points}"><title>{escape(c.name)}</title></polyline>')
        body += [f'<line class="key s{min(i, 4)}" x1="{key_x:.0f}" x2="{key_x + 14:.0f}" y1="{SPARK_H - 9}" '
                 f'y2="{SPARK_H - 9}"/>', f'<text x="{key_x + 18:.0f}" y="{SPARK_H - 5}">{escape(c.name)}</text>']
        key_x += 30 + KEY_CHAR_W * len(c.name)
    return (f'<svg class="spark" role="img" aria-label="{escape(label)}" viewBox="0 0 {SPARK_W} {SPARK_H}" '
            f'width="{SPARK_W}" height="{SPARK_H}" xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}'
            "</title>" + "".join(body) + "</svg>")


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last) runs."""
    out: list[tuple[int, int]] = []
    for position in positions:
        if out and position == out[-1][1] + 1:
            out[-1] = (out[-1][0], position)
        else:
            out.append((position, position))
    return out


def _offset_runs(at: list[tuple[int, int] | None], length: int) -> list[list[int]]:
    """The offsets below `length`, split where the window skips positions (a line is not drawn across a gap)."""
    runs: list[list[int]] = [[]]
    for a in at:
        if a is None:
            runs.append([])
        elif a[0] < length:
            runs[-1].append(a[0])
    return [r for r in runs if r]


def _tokens_table(explored: Explored) -> str:
    at = window(explored)
    marked = {p for c in explored.completions for p in (c.split, c.flip and c.flip.position) if p is not None}
    head = "".join("<th>…</th>" if a is None else
                   f"<th{' class=at-split' if a[1] in marked else ''}>{a[1]}</th>" for a in at)
    rows = [f"<tr><th>completion (requests)</th>{head}</tr>"]
    for i, c in enumerate(explored.completions):
        cells = [f'<td class="name">{escape(c.name)} ({c.requests})</td>']
        for a in at:
            if a is None:
                cells.append("<td>…</td>")
                continue
            offset, position = a
            # a branch's row is muted (its tokens as the first's) unless marked: a class per token is heavy
            kind = mark(explored, c, offset, position)
            if offset >= len(c.tokens):  # it ended: marked still where that is its split
                cells.append(f'<td class="{kind}" title="ended">∅</td>' if kind in MARKS else "<td></td>")
                continue
            logprob = c.logprobs[offset] if offset < len(c.logprobs) else None
            title = " / ".join([*([MARKS[kind].removeprefix("◀ ")] if kind in MARKS else []),
                                *([f"{logprob:.6g}"] if logprob is not None else [])])
            attributes = (f' class="{kind}"' if kind else "") + (f' title="{title}"' if title else "")
            cells.append(f"<td{attributes}>{escape(token_text(c.tokens[offset]))}</td>")
        rows.append(("<tr class=branch>" if i else "<tr>") + "".join(cells) + "</tr>")
    return '<table class="tokens">' + "".join(rows) + "</table>"


def _topk(explored: Explored, branch: Completion) -> str:
    """The top-k of both at the branch's split, and at its later token flip if any."""
    def table(name: str, entries: list[TopEntry], others: list[TopEntry]) -> str:
        rows = "".join(f"<tr{'' if i < len(others) and others[i] == e else ' class=differ'}><td>{i + 1}</td>"
                       f"<td><code>{escape(token_text(e.token))}</code></td><td>{e.logprob:.12g}</td></tr>"
                       for i, e in enumerate(entries))
        return (f'<div class="topk"><table><tr><th>#</th><th>{escape(name)}</th><th>logprob</th></tr>{rows}'
                "</table></div>")

    first = explored.completions[0]
    return "".join(f"<p>{escape(sentence).replace('**', '')}</p>" + table(first.name, first_top, top)
                   + table(branch.name, top, first_top) for sentence, first_top, top in forks(explored, branch))


def _text_table(explored: Explored) -> str:
    """Signed on text: the shared prefix once, then each completion from its window, the part from its split
    on marked."""
    rows = ["<tr><th>completion (requests)</th><th>parts at character</th><th>from character</th><th>text</th>"
            "</tr>"]
    if explored.prefix:
        cut = "…" if explored.window_start > len(explored.prefix) else ""
        shown = escape(text_shown(explored.prefix))
        rows.append(f'<tr><td class="name">shared by all</td><td></td>'
                    f'<td>{explored.window_start - len(explored.prefix)}</td><td class="text">{cut}{shown}</td></tr>')
    for i, c in enumerate(explored.completions):
        same, rest, more = (text_shown(part) for part in text_parts(explored, c))
        split = f'<span class="split"><b>{escape(rest[:1])}</b>{escape(rest[1:])}</span>' if rest else ""
        rows.append(("<tr class=branch>" if i else "<tr>") + f'<td class="name">{escape(c.name)} ({c.requests})</td>'
                    f"<td>{'-' if c.split is None else c.split}</td><td>{c.text_start}</td>"
                    f'<td class="text">{escape(same)}{split}{more}</td></tr>')
    return (f"<p>{escape(TEXT_SIGNED)}; no logprob chart either.</p>"
            '<table class="textsplit">' + "".join(rows) + "</table>")


def explored_html(explored: Explored, index: int) -> str:
    body = [_text_table(explored)] if explored.basis == "text" else [_tokens_table(explored), sparkline(explored)]
    parts = [f'<details class="explore" id="explore-{index}" data-label="{escape(explored.label)}">',
             f"<summary>{escape(summary(explored))}</summary>", *body,
             "<ul>" + "".join(f"<li><strong>{escape(c.name)}</strong>: {escape(who(c))}</li>"
                              for c in explored.completions) + "</ul>"]
    parts += [_topk(explored, c) for c in explored.completions[1:] if c.split is not None and explored.basis != "text"]
    if explored.more_branches:
        parts.append(f"<p>{more_branches(explored)}, not shown (<code>study.explorer_branches</code>, "
                     "<code>compare --branches</code>).</p>")
    if explored.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in explored.notes) + "</ul>")
    if explored.inside is not None:
        lines = inside_lines(explored.inside)
        parts.append(f"<p><strong>{SECTION}</strong>: {escape(lines[0])}</p>"
                     f'<pre class="inside">{escape(chr(10).join(lines[1:]))}</pre>')
    return "\n".join([*parts, "</details>"])


def section(result: Comparison) -> str:
    """The explorer's <section>, or nothing when no cell diverged and no pair differs."""
    if not result.explorer and not result.pair_explorer:
        return ""
    out = ['<section id="explorer">']
    if result.explorer:
        out += ["<h2>Where it split</h2>", "<p>Each cell with more than one signature: open it (click, or Tab to it "
                "and press Enter) for the completions aligned on the modal one, the split token marked, the top-k of "
                "both at the split, and who took each branch.</p>"]
    out += [explored_html(e, i) for i, e in enumerate(result.explorer)]
    if result.pair_explorer:
        out += ["<h2>Where the arms split</h2>", "<p>Each A/B pair that differs: the two arms' modal completions."
                "</p>"]
        out += [explored_html(e, len(result.explorer) + i) for i, e in enumerate(result.pair_explorer)]
    if result.explorer_left_out:
        out.append(f"<p>{result.explorer_left_out} more divergent cells or pairs are not explored here (the "
                   "report's limit); <code>orchestrator show RUN</code> lists every cell that diverged.</p>")
    return "\n".join([*out, "</section>"])
