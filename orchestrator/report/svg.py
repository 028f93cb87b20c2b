"""The report's pictures as inline SVG, drawn here (no plotting library, no network): colours are CSS
variables of report.html, so the light and dark themes restyle them. Every mark carries a <title> (its
tooltip) with the exact number."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from orchestrator.errors import counted

WIDTH = 960
LABEL_W = 250  # left margin for row labels
ROW_H = 16
MAX_COLUMNS = 200  # longer series are binned (the maximum of each bin), so a 3000-token prompt stays light
MAX_ROWS = 40  # heatmap rows (cells) drawn at most; the caption says which were left out


def _svg(height: int, label: str, body: list[str]) -> str:
    return (f'<svg class="chart" role="img" aria-label="{escape(label)}" viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{escape(label)}</title>" + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "") -> str:
    attribute = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{attribute}>{escape(text)}</text>'


def _binned(values: Sequence[float | None]) -> tuple[list[float | None], int]:
    size = max(1, math.ceil(len(values) / MAX_COLUMNS))
    if size == 1:
        return list(values), 1
    out: list[float | None] = []
    for start in range(0, len(values), size):
        present = [v for v in values[start:start + size] if v is not None]
        out.append(max(present) if present else None)
    return out, size


def _shade(value: float, low: float, high: float) -> float:
    """Opacity on a log scale between the smallest and largest non-zero spread. The smallest stays at 0.35: in
    the dark theme, fainter reads as the grey of a cell with no spread."""
    if value <= 0:
        return 0.0
    if high <= low:
        return 1.0
    return 0.35 + 0.65 * (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low))


def _drawn(rows: list[tuple[str, Sequence[float | None]]]) -> tuple[list[tuple[str, Sequence[float | None]]], str]:
    """At most MAX_ROWS rows, so 10,000 requests stay a light picture: past it, the cells with no spread are left
    out, then the cells of the smallest spread; the rows keep their order. Also says what was left out."""
    if len(rows) <= MAX_ROWS:
        return rows, ""
    peaks = [max((v for v in values if v is not None), default=0.0) for _, values in rows]
    spread = [i for i, peak in enumerate(peaks) if peak > 0]
    kept = set(sorted(spread, key=lambda i: -peaks[i])[:MAX_ROWS])
    flat, smaller = len(rows) - len(spread), len(spread) - len(kept)
    left_out = [f"{counted(flat, 'cell')} with spread 0 at every position"] if flat else []
    left_out += [f"{counted(smaller, 'cell')} of smaller spread"] if smaller else []
    return ([row for i, row in enumerate(rows) if i in kept],
            f"{len(kept)} of {len(rows)} cells drawn, the largest spread first; not drawn: {', '.join(left_out)}")


def _runs(values: list[float | None]) -> list[tuple[int, int, float]]:
    """Columns as (first, last, value) runs of one value: a row of equal spreads is one rectangle."""
    out: list[tuple[int, int, float]] = []
    for c, value in enumerate(values):
        if value is None:
            continue
        if out and out[-1][1] == c - 1 and out[-1][2] == value:
            out[-1] = (out[-1][0], c, value)
        else:
            out.append((c, c, value))
    return out


def heatmap(title: str, rows: list[tuple[str, Sequence[float | None]]], xlabel: str,
            marks: dict[str, int] | None = None) -> str:
    """Rows = cells, columns = positions, shade = spread (max - min logprob across the cell's requests);
    `marks`: row label -> position of its first divergence, ringed. Bounded: at most MAX_ROWS rows (`_drawn`),
    MAX_COLUMNS columns (the maximum of each bin), and one rectangle per run of equal spread."""
    drawn, left_out = _drawn(rows)
    binned = [(label, *_binned(values)) for label, values in drawn]
    columns = max((len(v) for _, v, _ in binned), default=0)
    if not columns:
        return ""
    nonzero = [v for _, values, _ in binned for v in values if v is not None and v > 0]
    low, high = (min(nonzero), max(nonzero)) if nonzero else (0.0, 0.0)
    cell_w = (WIDTH - LABEL_W - 20) / columns
    top = 28
    body = [_text(0, 14, title, cls="caption")]
    for r, (label, values, size) in enumerate(binned):
        y = top + r * ROW_H
        body.append(_text(LABEL_W - 6, y + ROW_H - 4, label, "end"))
        for first, last, value in _runs(values):
            x = LABEL_W + first * cell_w
            stop = min(last * size + size, len(drawn[r][1])) - 1
            where = f"position {first * size}" if stop == first * size else f"positions {first * size}-{stop}"
            shade = f'class="heat" fill-opacity="{_shade(value, low, high):.3f}"' if value > 0 else 'class="zero"'
            body.append(f'<rect {shade} x="{x:.2f}" y="{y}" width="{(last - first + 1) * cell_w + 0.05:.2f}" '
                        f'height="{ROW_H - 2}"><title>{escape(label)}, {where}: spread {value:.3g}</title></rect>')
        mark = (marks or {}).get(label)
        if mark is not None:
            x = LABEL_W + (mark // size + 0.5) * cell_w
            body.append(f'<circle class="mark" cx="{x:.1f}" cy="{y + ROW_H / 2 - 1}" r="5"><title>{escape(label)}: '
                        f"first divergence at position {mark}</title></circle>")
    bottom = top + len(binned) * ROW_H + 14
    scale = f"grey = 0, then a log scale up to solid = {high:.3g}" if nonzero else "grey: every spread is 0"
    binning = (f"; {binned[0][2]} positions per column, each the largest spread of its positions"
               if any(s > 1 for _, _, s in binned) else "")
    body.append(_text(LABEL_W, bottom, f"{xlabel} 0-{max(len(v) for _, v in drawn) - 1} ({scale}{binning})"))
    if marks:
        body.append(_text(WIDTH - 10, bottom, "ring: first divergence", "end"))
    if left_out:
        bottom += 16
        body.append(_text(LABEL_W, bottom, left_out))
    return _svg(bottom + 8, title, body)


def dots(title: str, rows: list[tuple[str, int, str]], xlabel: str) -> str:
    """One row per (label, position, kind): where first divergences fall along the generated tokens."""
    if not rows:
        return ""
    longest = max(p for _, p, _ in rows) + 1
    span = WIDTH - LABEL_W - 40
    top = 28
    body = [_text(0, 14, title, cls="caption")]
    for r, (label, position, kind) in enumerate(rows):
        y = top + r * ROW_H
        body.append(_text(LABEL_W - 6, y + ROW_H - 4, label, "end"))
        body.append(f'<line class="axis" x1="{LABEL_W}" x2="{LABEL_W + span}" y1="{y + 7}" y2="{y + 7}"/>')
        x = LABEL_W + span * position / max(1, longest - 1)
        body.append(f'<circle class="dot {kind}" cx="{x:.1f}" cy="{y + 7}" r="5"><title>{escape(label)}: token '
                    f"{position} ({kind})</title></circle>")
        body.append(_text(x + 8, y + ROW_H - 4, str(position)))
    bottom = top + len(rows) * ROW_H + 14
    body.append(_text(LABEL_W, bottom, f"{xlabel} 0-{longest - 1}; filled: near-tie flip, open: not a near-tie "
                                       "or gap unknown"))
    return _svg(bottom + 8, title, body)


def grouped_bars(title: str, groups: list[tuple[str, list[tuple[str, int, int]]]]) -> str:
    """Per group (arm / prompt) one bar per phase: distinct signatures, annotated `d in n`."""
    if not groups:
        return ""
    most = max((d for _, bars in groups for _, d, _ in bars), default=1)
    span = WIDTH - LABEL_W - 180  # room for the label after the longest bar
    y = 28
    body = [_text(0, 14, title, cls="caption")]
    for label, bars in groups:
        body.append(_text(LABEL_W - 6, y + ROW_H - 4, label, "end"))
        for i, (phase, distinct, n) in enumerate(bars):
            width = span * distinct / max(most, 1)
            body.append(f'<rect class="bar p{i % 4}" x="{LABEL_W}" y="{y}" width="{max(width, 1):.1f}" '
                        f'height="{ROW_H - 3}"><title>{escape(label)} {escape(phase)}: {distinct} distinct in '
                        f"{n}</title></rect>")
            body.append(_text(LABEL_W + width + 6, y + ROW_H - 5, f"{phase}: {distinct} in {n}"))
            y += ROW_H
        y += 6
    body.append(_text(LABEL_W, y + 12, "distinct signatures per cell (1 = every request agreed)"))
    return _svg(y + 20, title, body)


def matrix(title: str, columns: list[str], rows: list[tuple[str, list[tuple[str, str]]]]) -> str:
    """A grid of verdict tiles: `rows` = (label, [(text, kind) per column]), kind ok | differ | unknown."""
    if not rows:
        return ""
    tile_w = (WIDTH - LABEL_W - 10) / len(columns)
    top = 44
    body = [_text(0, 14, title, cls="caption")]
    body += [_text(LABEL_W + (i + 0.5) * tile_w, 36, c, "middle") for i, c in enumerate(columns)]
    for r, (label, tiles) in enumerate(rows):
        y = top + r * (ROW_H + 4)
        body.append(_text(LABEL_W - 6, y + ROW_H - 3, label, "end"))
        for i, (text, kind) in enumerate(tiles):
            x = LABEL_W + i * tile_w
            body.append(f'<rect class="tile {kind}" x="{x + 2:.1f}" y="{y}" width="{tile_w - 4:.1f}" '
                        f'height="{ROW_H + 1}"><title>{escape(label)}, {escape(columns[i])}: {escape(text)}'
                        "</title></rect>")
            body.append(_text(x + tile_w / 2, y + ROW_H - 3, text, "middle", "on-tile"))
    return _svg(top + len(rows) * (ROW_H + 4) + 8, title, body)


def frontier(title: str, points: list[tuple[float, float, float, float, float | None]]) -> str:
    """Two panels against offered load (req/s): left the divergence rate with its 95 % bounds (a bar from lower
    to upper), right the throughput reached; `points` = (offered, rate, lower, upper, throughput)."""
    if not points:
        return ""
    panel, top, height = (WIDTH - 120) / 2, 34, 170
    most_x = max(p[0] for p in points) or 1.0
    most_rate = max(p[3] for p in points) or 1.0
    most_thr = max((p[4] or 0.0) for p in points) or 1.0
    body = [_text(0, 14, title, cls="caption")]

    def y_of(value: float, most: float) -> float:
        return top + height * (1 - value / most)

    for left, caption, top_value in ((50.0, "divergence rate (95 % bounds)", most_rate),
                                     (100 + panel, "throughput reached (req/s)", most_thr)):
        body.append(f'<line class="axis" x1="{left}" x2="{left + panel}" y1="{top + height}" y2="{top + height}"/>')
        body.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + height}"/>')
        body.append(_text(left + panel / 2, top - 6, caption, "middle"))
        label = f"{100 * top_value:.3g} %" if left == 50.0 else f"{top_value:.3g}"
        body.append(_text(left - 4, top + 8, label, "end"))
        body.append(_text(left - 4, top + height, "0", "end"))
        body.append(_text(left + panel, top + height + 28, "offered load (req/s)", "end"))
    for offered, rate, lower, upper, throughput in points:
        x = 50 + panel * offered / most_x * 0.95
        body += [_text(at, top + height + 14, f"{offered:.3g}", "middle") for at in (x, x + 50 + panel)]
        body.append(f'<line class="dot" x1="{x:.1f}" x2="{x:.1f}" y1="{y_of(lower, most_rate):.1f}" '
                    f'y2="{y_of(upper, most_rate):.1f}"/>')
        body.append(f'<circle class="dot" cx="{x:.1f}" cy="{y_of(rate, most_rate):.1f}" r="4"><title>offered '
                    f"{offered:.3g} req/s: divergence rate {100 * rate:.3g} % ({100 * lower:.3g}-{100 * upper:.3g} "
                    "% at 95 %)</title></circle>")
        if throughput is not None:
            tx = x + 50 + panel
            body.append(f'<circle class="dot tie" cx="{tx:.1f}" cy="{y_of(throughput, most_thr):.1f}" r="4"><title>'
                        f"offered {offered:.3g} req/s: {throughput:.3g} req/s reached</title></circle>")
    return _svg(top + height + 36, title, body)


def against_load(title: str, panels: list[tuple[str, list[tuple[float, float, float | None, float | None]]]],
                 band: tuple[float | None, float | None]) -> str:
    """Panels side by side against offered load (req/s), each `(caption, [(offered, value, lower, upper)])`: a
    dot, and a bar from lower to upper (its 95 % interval) where there is one; `band`: the saturation point's
    bound on the load axis, shaded in every panel (an end None: not known)."""
    drawn = [(caption, points) for caption, points in panels if points]
    if not drawn:
        return ""
    panel, top, height = (WIDTH - 60) / len(drawn) - 60, 34, 170
    most_x = max(p[0] for _, points in drawn for p in points) or 1.0
    body = [_text(0, 14, title, cls="caption")]
    for i, (caption, points) in enumerate(drawn):
        left = 60 + i * (panel + 60)
        most = max(max(p[1], p[3] or 0.0) for p in points) or 1.0

        def x_of(value: float, left: float = left) -> float:
            return left + panel * value / most_x * 0.95

        def y_of(value: float, most: float = most) -> float:
            return top + height * (1 - value / most)

        if band[0] is not None or band[1] is not None:
            low, high = x_of(band[0] or 0.0), x_of(min(band[1] or most_x, most_x / 0.95))
            body.append(f'<rect class="tie" opacity="0.2" x="{low:.1f}" y="{top}" width="{max(high - low, 1):.1f}" '
                        f'height="{height}"><title>saturation point: between {band[0] or 0:.3g} and '
                        f'{"?" if band[1] is None else f"{band[1]:.3g}"} req/s</title></rect>')
        body += [f'<line class="axis" x1="{left}" x2="{left + panel}" y1="{top + height}" y2="{top + height}"/>',
                 f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + height}"/>',
                 _text(left + panel / 2, top - 6, caption, "middle"), _text(left - 4, top + 8, f"{most:.3g}", "end"),
                 _text(left - 4, top + height, "0", "end"),
                 _text(left + panel, top + height + 28, "offered load (req/s)", "end")]
        for offered, value, lower, upper in points:
            x = x_of(offered)
            body.append(_text(x, top + height + 14, f"{offered:.3g}", "middle"))
            if lower is not None and upper is not None:
                body.append(f'<line class="dot" x1="{x:.1f}" x2="{x:.1f}" y1="{y_of(max(lower, 0.0)):.1f}" '
                            f'y2="{y_of(upper):.1f}"/>')
            interval = "" if lower is None or upper is None else f" ({lower:.3g}-{upper:.3g} at 95 %)"
            body.append(f'<circle class="dot" cx="{x:.1f}" cy="{y_of(value):.1f}" r="4"><title>offered {offered:.3g} '
                        f"req/s: {caption} {value:.3g}{interval}</title></circle>")
    return _svg(top + height + 36, title, body)
