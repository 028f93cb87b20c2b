"""report.html's explorer: one <details> per divergent cell (and per A/B pair that differs), opened from the
keyboard like any disclosure (Tab to its summary, Enter or Space); inside, the completions aligned on the first
one with the split token marked, a small SVG of each completion's chosen-token logprob around the split, who took
each branch, and the top-k of both at the split. A cell signed on text: its completions' characters from the split,
and why there is no chart or top-k."""

from __future__ import annotations

from html import escape

from orchestrator.analysis.results import Comparison, Completion, Explored
from orchestrator.report.explorer_md import TEXT_SIGNED, gap_text, summary, text_parts, text_shown, token_text, who

STYLE = """
details.explore{border:1px solid var(--line);border-radius:6px;margin:0.4em 0;padding:0.2em 0.8em;
background:var(--box)}
details.explore>summary{cursor:pointer;font-weight:600;padding:0.2em 0}
details.explore>summary:focus-visible{outline:2px solid var(--p0);outline-offset:2px}
table.tokens td{font-family:ui-monospace,monospace;white-space:pre;text-align:center}
table.tokens td.name{font-family:system-ui,sans-serif;text-align:left}
table.tokens tr.branch td{color:var(--muted)} table.tokens tr.branch td.differ{color:var(--differ)}
table.tokens tr.branch td.split{background:var(--differ);color:#fff;font-weight:700}
table.tokens th.at-split{border-bottom:3px solid var(--differ)}
.topk tr.differ td{color:var(--differ);font-weight:600}
.topk{display:inline-block;vertical-align:top;margin-right:1.5em}
svg.spark{display:block;margin:0.4em 0} svg.spark text{fill:var(--fg);font-size:10px;font-family:system-ui}
svg.spark .axis{stroke:var(--line)} svg.spark .split{stroke:var(--differ);stroke-dasharray:3 2}
svg.spark polyline{fill:none;stroke-width:1.5} svg.spark .s0{stroke:var(--p0)} svg.spark .s1{stroke:var(--differ)}
svg.spark .s2{stroke:var(--p1)} svg.spark .s3{stroke:var(--p2)} svg.spark .s4{stroke:var(--p3)}
table.textsplit td.text{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
table.textsplit tr.branch td.text{color:var(--muted)}
table.textsplit span.split{color:var(--differ);font-weight:600}
table.textsplit span.split b{background:var(--differ);color:#fff}
"""

SPARK_W, SPARK_H, PAD = 520, 110, 34


def sparkline(explored: Explored) -> str:
    """The chosen token's logprob of each completion over the window; a dashed line at each split."""
    values = [v for c in explored.completions for v in c.logprobs if v is not None]
    width = max(len(c.logprobs) for c in explored.completions)
    if not values or width < 2:
        return ""
    low, high = min(values), max(max(values), min(values) + 1e-9)
    plot_w, plot_h = SPARK_W - PAD - 8, SPARK_H - 30

    def x(offset: int) -> float:
        return PAD + plot_w * offset / (width - 1)

    def y(value: float) -> float:
        return 8 + plot_h * (high - value) / (high - low)

    label = f"chosen-token logprob, positions {explored.window_start}-{explored.window_start + width - 1}"
    body = [f'<line class="axis" x1="{PAD}" x2="{PAD + plot_w}" y1="{8 + plot_h}" y2="{8 + plot_h}"/>',
            f'<text x="{PAD - 3}" y="12" text-anchor="end">{high:.2g}</text>',
            f'<text x="{PAD - 3}" y="{8 + plot_h}" text-anchor="end">{low:.2g}</text>',
            f'<text x="{PAD}" y="{SPARK_H - 6}">{escape(label)}</text>']
    for c in explored.completions:
        if c.split is not None:
            at = x(c.split - explored.window_start)
            body.append(f'<line class="split" x1="{at:.1f}" x2="{at:.1f}" y1="4" y2="{8 + plot_h}">'
                        f"<title>{escape(c.name)} splits at token {c.split}</title></line>")
    for i, c in enumerate(explored.completions):
        points = " ".join(f"{x(o):.1f},{y(v):.1f}" for o, v in enumerate(c.logprobs) if v is not None)
        body.append(f'<polyline class="s{min(i, 4)}" points="{points}"><title>{escape(c.name)}</title></polyline>')
    return (f'<svg class="spark" role="img" aria-label="{escape(label)}" viewBox="0 0 {SPARK_W} {SPARK_H}" '
            f'width="{SPARK_W}" height="{SPARK_H}" xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}'
            "</title>" + "".join(body) + "</svg>")


def _tokens_table(explored: Explored) -> str:
    first = explored.completions[0]
    width = max(len(c.tokens) for c in explored.completions)
    splits = {c.split for c in explored.completions if c.split is not None}
    head = "".join(f"<th{' class=at-split' if explored.window_start + o in splits else ''}>"
                   f"{explored.window_start + o}</th>" for o in range(width))
    rows = [f"<tr><th>completion (requests)</th>{head}</tr>"]
    for i, c in enumerate(explored.completions):
        cells = [f'<td class="name">{escape(c.name)} ({c.requests})</td>']
        for o in range(width):
            token = c.tokens[o] if o < len(c.tokens) else None
            if token is None:
                cells.append("<td></td>")
                continue
            logprob = c.logprobs[o] if o < len(c.logprobs) else None
            # a branch's row is muted (its tokens as the first's) unless marked: a class per token is heavy
            kind = "split" if c.split == explored.window_start + o else \
                "differ" if i and (o >= len(first.tokens) or token != first.tokens[o]) else ""
            attributes = (f' class="{kind}"' if kind else "") + \
                (f' title="{logprob:.6g}"' if logprob is not None else "")
            cells.append(f"<td{attributes}>{escape(token_text(token))}</td>")
        rows.append(("<tr class=branch>" if i else "<tr>") + "".join(cells) + "</tr>")
    return '<table class="tokens">' + "".join(rows) + "</table>"


def _topk(first: Completion, branch: Completion) -> str:
    def table(name: str, entries: list[tuple[str, float]], others: list[tuple[str, float]]) -> str:
        rows = "".join(f"<tr{'' if i < len(others) and others[i] == (t, lp) else ' class=differ'}><td>{i + 1}</td>"
                       f"<td><code>{escape(token_text(t))}</code></td><td>{lp:.12g}</td></tr>"
                       for i, (t, lp) in enumerate(entries))
        return (f'<div class="topk"><table><tr><th>#</th><th>{escape(name)}</th><th>logprob</th></tr>{rows}'
                "</table></div>")

    kind = "another token" if branch.split_kind == "token" else "the same token, other top-k logprobs"
    return (f"<p>At token {branch.split}, <strong>{escape(branch.name)}</strong> parts from {escape(first.name)} "
            f"({kind}); {escape(first.name)}'s {escape(gap_text(branch)).replace('**', '')}.</p>"
            + table(first.name, mine := [(e.token, e.logprob) for e in branch.first_top_at_split],
                    theirs := [(e.token, e.logprob) for e in branch.top_at_split])
            + table(branch.name, theirs, mine))


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
    first = explored.completions[0]
    parts += [_topk(first, c) for c in explored.completions[1:] if c.split is not None and explored.basis != "text"]
    if explored.more_branches:
        parts.append(f"<p>{explored.more_branches} more branch(es), {explored.more_branch_requests} request(s), "
                     "not shown (<code>study.explorer_branches</code>, <code>compare --branches</code>).</p>")
    if explored.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in explored.notes) + "</ul>")
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
