"""An onset search's report.md and report.html (docs/onset.md): per configuration the answer, the rate
against the axis with its bounds per point, the posterior over the onset, every job's run dir linked, and
where each first divergence lies against a declared budget. Made from onset.json's content alone."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from orchestrator.analysis.stats import divergence_bound
from orchestrator.errors import noun
from orchestrator.report.html import STYLE, markdown_to_html

FILE = "onset.json"  # as sweep/onset_state.py writes it
W, H, PAD = 960, 260, 64
RATE_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
# target.outcome as the report names what is counted
COUNTED = {"reference": "requests off the arm's reference answer", "divergent": "requests off the cell's modal answer",
           "top1_flips": "top-1 flips"}


def write_reports(sweep_dir: Path, state: dict[str, Any]) -> None:
    (sweep_dir / "report.md").write_text(markdown(state))
    (sweep_dir / "report.html").write_text(page(state))


def remade(sweep_dir: Path) -> list[str]:
    """`compare SWEEP_DIR` of an onset search: its reports again from onset.json, as the search wrote them (its
    jobs' records are in onset.json: each job's counts as read when it ended); each configuration's answer."""
    state = json.loads((sweep_dir / FILE).read_text())
    write_reports(sweep_dir, state)
    first = "provisional (the search was interrupted): " if state.get("interrupted") else ""
    return [*(first + (f"[{' '.join(c['per'])}] " if c["per"] else "")
              + (c.get("result") or {}).get("line", "no answer") for c in state["configurations"]),
            f"Onset report: {sweep_dir / 'report.md'}  onset.json: {sweep_dir / FILE}"]


def markdown(state: dict[str, Any]) -> str:
    out = opening(state)
    for c, r in _results(state):
        out += [*_head(c, r, state), *_markdown_table(jobs_table(state, c)), *_posterior(state, r)]
    return "\n".join(out) + "\n"


def page(state: dict[str, Any]) -> str:
    """report.html: the same content, the run dirs linked to their report.html, each configuration's chart."""
    body = markdown_to_html("\n".join(opening(state)))
    for c, r in _results(state):
        body += [*markdown_to_html("\n".join(_head(c, r, state))), _html_table(jobs_table(state, c)),
                 *markdown_to_html("\n".join(_posterior(state, r))), *charts_of(state, c)]
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>onset: "
            f"{html.escape(state['settings']['axis']['key'])}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _results(state: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(c, c.get("result") or {}) for c in state["configurations"]]


def opening(state: dict[str, Any]) -> list[str]:
    s = state["settings"]
    axis, target = s["axis"], s["target"]
    cells = "/".join(target.get(k) or "*" for k in ("arm", "prompt", "phase"))
    counted = COUNTED.get(target["outcome"], target["outcome"])
    out = [f"# Onset of {counted} along {axis['key']}", "",
           f"Axis {axis['key']} in [{_num(axis['low'])}, {_num(axis['high'])}] ({axis['type']}, {axis['scale']}, "
           f"{len(state['grid'])} grid points); target cells {cells}, counted: {counted} "
           f"(target.outcome={target['outcome']}); width wanted {_wanted(s['width'], axis['scale'])} at "
           f"{s['confidence']:.0%}; budget {s['max_jobs']} jobs"
           + (f", {s['max_requests']} requests" if s["max_requests"] else "") + " per configuration.", ""]
    if state.get("interrupted"):
        done = sum(len(c["jobs"]) for c in state["configurations"])
        out += [f"**Interrupted** after {done} of {s['max_jobs'] * len(state['configurations'])} jobs: the answers "
                "below are provisional. The same command with the same hydra.sweep.dir (this directory) resumes "
                "the search.", ""]
    if abandoned := state.get("abandoned"):
        out += [f"Job {noun(len(abandoned), 'dir')} {', '.join(abandoned)}: left by an interrupted round, not "
                "counted (a job cut short); a resumed search plans its points again.", ""]
    results = _results(state)
    if len(results) > 1:  # "is the threshold shared by every configuration?"
        out += ["## Side by side", "", "| configuration | answer | interval | jobs | requests |",
                "|---|---|---|---|---|"]
        out += [f"| {' '.join(c['per']) or '(as given)'} | {r.get('outcome', '-')} | {_interval(r)} | "
                f"{len(c['jobs'])} | {sum(j['requests'] for j in c['jobs'])} |" for c, r in results]
        out.append("")
    return out


def _wanted(width: float | None, scale: str) -> str:
    if width is None:
        return "one grid step"
    return f"a factor {_num(width)}" if scale == "log" else _num(width)


def _head(c: dict[str, Any], r: dict[str, Any], state: dict[str, Any]) -> list[str]:
    said = r.get("line", "no answer yet")
    out = [f"## {' '.join(c['per']) or 'Onset'}", "",
           f"Provisional, the search was interrupted: {said}" if state.get("interrupted") else f"**{said}**", ""]
    if r.get("stop"):
        out += [f"Stopped: {r['stop']}.", ""]
    if (isl := r.get("islands")) and None in isl["rates"]:  # a segment of no measured point weighs nothing
        out += ["Two change points against one: not weighed, the most probable split of the measured points "
                "leaves a segment with none of them (measure more points).", ""]
    elif isl:
        shape = " -> ".join("-" if x is None else f"{x:.2f}" for x in isl["rates"])
        out += [f"Two change points against one: Bayes factor {isl['bayes_factor']:.3g}; rates along the axis "
                f"{shape}{' (an island: back to the base rate)' if isl['island'] else ''}.", ""]
    return out


JOB_COLUMNS = ("job", "value", "k / n", "rate (95 %)", "prompt tokens", "first divergence (absolute)", "status",
               "run dir")


def jobs_table(state: dict[str, Any], c: dict[str, Any]) -> list[tuple[list[str], str]]:
    """Each job's cells but its run dir, and its run dir, ordered along the axis."""
    budget = state["settings"].get("budget_tokens")
    rows = []
    for j in sorted(c["jobs"], key=lambda j: (j["value"], j["job"])):
        rate = "-" if not j["n"] else f"{j['k'] / j['n']:.2f} ({_bounds(j['k'], j['n'])})"
        counted = "-" if j["k"] is None else f"{j['k']} / {j['n']}"
        prompt = "-" if j["prompt_tokens"] is None else str(j["prompt_tokens"])
        rows.append(([str(j["job"]), _num(j["value"]), counted, rate, prompt, placed(j, budget), str(j["status"])],
                     j["dir"]))
    return rows


def _markdown_table(rows: list[tuple[list[str], str]]) -> list[str]:
    out = ["| " + " | ".join(JOB_COLUMNS) + " |", "|" + "---|" * len(JOB_COLUMNS)]
    return [*out, *(f"| {' | '.join(cells)} | [{where}]({where}/report.md) |" for cells, where in rows), ""]


def _html_table(rows: list[tuple[list[str], str]]) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in JOB_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells)
                   + f'<td><a href="{html.escape(where)}/report.html">{html.escape(where)}</a></td></tr>'
                   for cells, where in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _posterior(state: dict[str, Any], r: dict[str, Any]) -> list[str]:
    post = r.get("posterior") or []
    if not post:
        return []
    grid = state["grid"]
    top = sorted(range(len(post)), key=lambda i: -post[i])[:5]
    return ["Posterior over the onset (the first grid point above it), most probable places:", "",
            *(f"- {_place(grid, i)}: {post[i]:.3f}" for i in sorted(top) if post[i] > 0.001), ""]


def placed(job: dict[str, Any], budget: int | None) -> str:
    """Where the job's answers first differ, at absolute positions (prompt tokens + generated index): the first
    position whose logprobs differ (where the signatures part) and the first flipped token, each said; against
    the budget, whether the prompt crossed it or generation did (at the earliest of the two)."""
    apart, flipped = job.get("first_logprob_position"), job.get("first_divergent_position")
    firsts = [f for f in (apart, flipped) if f is not None]
    if not firsts:
        return "-"
    prompt = job.get("prompt_tokens")

    def at(first: int) -> str:
        return f"generated {first}" if prompt is None else f"{prompt + first} ({prompt} + {first})"

    text = ("logprobs apart at " + ("none" if apart is None else at(apart)) + "; "
            + ("no token flipped" if flipped is None else f"token flipped at {at(flipped)}"))
    if prompt is None or budget is None:
        return text
    earliest = prompt + min(firsts)
    where = ("the prompt crossed the budget" if prompt > budget else "generation crossed the budget"
             if earliest > budget else "within the budget")
    return f"{text}: {where} {budget}"


def _place(grid: list[float], i: int) -> str:
    if i == 0:
        return f"below {_num(grid[0])} (diverges throughout)"
    if i == len(grid):
        return f"above {_num(grid[-1])} (no onset in range)"
    return f"after {_num(grid[i - 1])}, at {_num(grid[i])}"


def _interval(r: dict[str, Any]) -> str:
    iv = r.get("interval")
    if not iv:
        return "-"
    a, b = iv
    return f"[{'-' if a is None else _num(a)}, {'-' if b is None else _num(b)}] ({r['mass']:.0%})"


def _bounds(k: int, n: int) -> str:
    lower, upper = divergence_bound(k, n)
    return f"{lower:.2f}-{upper:.2f}"


def _num(x: float | None) -> str:
    return "-" if x is None else (str(int(x)) if float(x).is_integer() else f"{x:.6g}")


def charts_of(state: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """Rate against the axis (each point with its 95 % bounds) and the posterior over the onset, on one
    x scale (log where the axis is)."""
    grid, axis = state["grid"], state["settings"]["axis"]
    log = axis["scale"] == "log"
    lo, hi = (math.log(grid[0]), math.log(grid[-1])) if log else (grid[0], grid[-1])

    def x(v: float) -> float:
        return PAD + (W - 2 * PAD) * (((math.log(v) if log else v) - lo) / ((hi - lo) or 1))

    def y(p: float) -> float:
        return H - PAD + (2 * PAD - H) * p

    ticks = [f'<line x1="{PAD}" y1="{y(t):.1f}" x2="{W - PAD}" y2="{y(t):.1f}" stroke="currentColor" '
             f'opacity="0.15"/><text x="{PAD - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:.2f}</text>'
             for t in RATE_TICKS]
    marks = [*ticks, f'<line x1="{PAD}" y1="{y(0)}" x2="{PAD}" y2="{y(1)}" stroke="currentColor"/>',
             f'<text x="16" y="{y(0.5):.1f}" text-anchor="middle" transform="rotate(-90 16 {y(0.5):.1f})">'
             "rate (k / n)</text>",
             f'<line x1="{PAD}" y1="{y(0)}" x2="{W - PAD}" y2="{y(0)}" stroke="currentColor"/>',
             f'<text x="{PAD}" y="{H - 15}">{_num(grid[0])}</text>',
             f'<text x="{W - PAD}" y="{H - 15}" text-anchor="end">{_num(grid[-1])}</text>',
             f'<text x="{W / 2}" y="{H - 15}" text-anchor="middle">{html.escape(axis["key"])}</text>']
    for j in c["jobs"]:
        if not j["n"]:
            continue
        lower, upper = divergence_bound(j["k"], j["n"])
        px = x(j["value"])
        marks.append(f'<line x1="{px:.1f}" y1="{y(lower):.1f}" x2="{px:.1f}" y2="{y(upper):.1f}" '
                     f'stroke="currentColor" opacity="0.5"/><circle cx="{px:.1f}" cy="{y(j["k"] / j["n"]):.1f}" '
                     f'r="4"><title>{_num(j["value"])}: {j["k"]}/{j["n"]} ({lower:.2f}-{upper:.2f})</title></circle>')
    post = (c.get("result") or {}).get("posterior") or []
    inner = post[1:len(grid)]  # tau in 1..m-1: between grid points i-1 and i, drawn at point i
    if inner and max(inner) > 0:
        top = max(inner)
        path = " ".join(f"{x(grid[i + 1]):.1f},{y(0.9 * p / top):.1f}" for i, p in enumerate(inner))
        marks.append(f'<polyline points="{path}" fill="none" stroke="var(--accent, #c33)">'
                     f'<title>posterior over the onset (scaled to its peak, {top:.3f})</title></polyline>'
                     f'<text x="{W - PAD}" y="{y(0.9) - 6:.1f}" text-anchor="end" fill="var(--accent, #c33)">'
                     f"posterior, peak {top:.3f} (drawn at 0.90)</text>")
    label = f"rate against {axis['key']} with 95 % bounds, and the onset's posterior" + (
        f": {' '.join(c['per'])}" if c["per"] else "")  # the axis is named once
    return [f'<figure><svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" fill="currentColor" role="img" '
            f'aria-label="{html.escape(label)}" xmlns="http://www.w3.org/2000/svg"><title>{html.escape(label)}'
            f"</title>{''.join(marks)}</svg><figcaption>{html.escape(label)}</figcaption></figure>"]
