"""Reports a person reads (report.md, report.html with plots) and a machine reads (report.json),
made from the record alone. The wording never says "deterministic": it says how many distinct in how
many, and the bound on the divergence rate that this sample supports."""

from __future__ import annotations

import base64
import html
import io
import json
from typing import Any

from orchestrator.compare import arms_summary, compare
from orchestrator.paths import RunPaths, atomic_write_text
from orchestrator.store import read_table


def build(paths: RunPaths, study: str, run_id: str, baseline: str | None,
          expectations: dict[str, Any] | None = None, sources: list[RunPaths] | None = None,
          arm_pairs: list[tuple[str, str]] | None = None, sweep: dict[str, Any] | None = None,
          **_: Any) -> dict[str, Any]:
    """Write the reports into `paths` from the record of `sources` (default: the same run)."""
    records = sources or [paths]
    result = {"study": study, "run_id": run_id, "baseline": baseline, "arms": arms_summary(records),
              **compare(records, baseline, expectations, arm_pairs=arm_pairs)}
    if sweep:
        result["sweep"] = sweep
    if paths.guard_json.is_file():
        result["guard"] = json.loads(paths.guard_json.read_text())
    probes = read_table(paths, "probes").to_pylist()
    if probes:  # kernel probes recorded in this run dir (orchestrator probe --out RUN_DIR)
        result["probes"] = probes
    atomic_write_text(paths.report_json, json.dumps(result, indent=2, sort_keys=True, allow_nan=False) + "\n")
    atomic_write_text(paths.report_md, markdown(result))
    atomic_write_text(paths.report_html, to_html(result))
    return result


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def rate(cell: dict[str, Any]) -> str:
    if cell["distinct_signatures"] is None:
        return cell["signature_note"] or "n/a"
    if cell["divergent"] == 0:
        return f"divergence rate <= {_pct(cell['upper_bound_95'])} (95%)"
    return (f"{cell['divergent']} divergent in {cell['n']}; rate {_pct(cell['lower_bound_95'])}"
            f"-{_pct(cell['upper_bound_95'])} (95%)")


def _where(cell: dict[str, Any]) -> str:
    pos = cell["first_divergent_position"]
    if pos is None:
        return "-"
    gap = cell["top1_top2_gap"]
    tie = " (near-tie flip)" if cell["near_tie"] else ""
    return f"token {pos}, gap {gap:.3g}{tie}" if gap is not None else f"token {pos}"


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def cells_table(result: dict[str, Any]) -> str:
    lines = ["| arm | prompt | phase | n | distinct completions | distinct signatures | rate | first divergence |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["cells"]:
        sigs = "n/a" if c["distinct_signatures"] is None else f"{c['distinct_signatures']} in {c['n']}"
        errors = f" (+{c['errors']} errors)" if c["errors"] else ""
        lines.append(f"| {c['arm']} | {c['prompt_id']} | {c['phase']} | {c['n']}{errors} | "
                     f"{c['distinct_completions']} in {c['n']} | {sigs} | {rate(c)} | {_where(c)} |")
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(str(v) for v in row) + " |" for row in rows), ""]


def headline(result: dict[str, Any]) -> str:
    varying = [c for c in result["cells"] if c["distinct_signatures"] not in (None, 1)]
    parts = [f"{len(varying)} of {len(result['cells'])} cells show more than one signature"]
    differ = [s for s in result["schedules"] if s["verdict"] == "differ"]
    if differ:
        parts.append(f"{len(differ)} schedule comparisons differ")
    cold = [c for c in result["cold"] if c["matches_warm"] is False]
    if cold:
        parts.append(f"{len(cold)} cold first requests differ from warm")
    not_co = [c for c in result["cells"] if c["co_resident"] is False]
    if not_co:
        parts.append(f"{len(not_co)} concurrent cells were not actually co-resident")
    return "; ".join(parts) + "."


def markdown(result: dict[str, Any]) -> str:
    out = [f"# Study `{result['study']}`, run `{result['run_id']}`", ""]
    guard = result.get("guard")
    if guard:
        from orchestrator.guard import markdown_section

        out += [*markdown_section(guard), ""]
    out += [headline(result), ""]
    if result.get("sweep"):
        out += _sweep_section(result["sweep"])
    out += ["## Arms", ""]
    out += _table(["arm", "status", "image", "image id", "error"], [
        [a["arm"], a["status"], a["image_ref"], (a["image_id"] or "")[:19],
         (a["error"] or "").splitlines()[0] if a["error"] else ""] for a in result["arms"]])
    out += ["## Repeatability per cell (warm requests)", "",
            "Signatures hash the top-k logprobs at 12 significant digits. Bounds are 95%: one-sided when "
            "nothing diverged, Clopper-Pearson otherwise. A first divergence whose top1-top2 gap is tiny is "
            "a near-tie flip, not by itself a kernel defect.", "", cells_table(result), ""]
    positional = [c for c in result["cells"] if c["max_prompt_spread"] is not None]
    if positional:
        out += ["## Prompt positions (prompt_logprobs)", ""]
        out += _table(["arm", "prompt", "phase", "max forced-token spread", "first position with spread",
                       "min top-1 agreement", "min top-k overlap"], [
            [c["arm"], c["prompt_id"], c["phase"], _num(c["max_prompt_spread"]),
             _num(c["first_prompt_position_with_spread"], "d"), _num(c["min_top1_agreement"]),
             _num(c["min_topk_overlap"])] for c in positional])
    quality = [c for c in result["cells"] if c["quality_note"]]
    if quality:
        out += ["## Answer quality (separate from repeatability)", ""]
        out += _table(["arm", "prompt", "phase", "expectation", "passing", "distinct completions"], [
            [c["arm"], c["prompt_id"], c["phase"], c["quality_note"], _pct(c["quality_pass"]),
             c["distinct_completions"]] for c in quality])
    concurrent = [c for c in result["cells"] if c["batch_size"] is not None]
    if concurrent:
        out += ["## Concurrent batches", "",
                "Requests of a batch are released together; `running seen` is the lowest, over the batches, "
                "of the most running requests the server's /metrics showed while the batch was in flight.", ""]
        out += _table(["arm", "prompt", "phase", "batch size", "send spread (ms)", "running seen", "co-resident"], [
            [c["arm"], c["prompt_id"], c["phase"], c["batch_size"], _num(c["max_send_spread_ms"]),
             _num(c["min_running_observed"], "d"),
             {True: "yes", False: "**no**", None: "unknown (no /metrics)"}[c["co_resident"]]] for c in concurrent])
    if result["cold"]:
        out += ["## Cold first request vs warm repeats", ""]
        out += _table(["arm", "prompt", "phase", "cold matches warm"], [
            [c["arm"], c["prompt_id"], c["phase"],
             {True: "yes", False: "**no**", None: "not comparable"}[c["matches_warm"]]] for c in result["cold"]])
    parity = f"Parity with the baseline `{result['baseline']}`" if result["baseline"] else "Parity of arm pairs"
    for title, key, first in (("Schedules within an arm", "schedules", ("arm", "phase_a", "phase_b")),
                              (parity, "pairs", ("arm_a", "arm_b", "phase"))):
        if result[key]:
            out += [f"## {title}", ""]
            out += _table([*first, "prompt", "verdict", "first differing token", "max prompt logprob diff"], [
                [*(r[k] for k in first), r["prompt_id"], r["verdict"], _num(r["first_divergent_position"], "d"),
                 _num(r["max_prompt_logprob_diff"])] for r in result[key]])
    if result.get("probes"):
        from orchestrator.probe_runner import render_markdown

        out += ["## Kernel probes", "", render_markdown(result["probes"]), ""]
    if result["pooled"]:
        out += ["## Pooled over cells", ""]
        out += _table(["arm", "cells", "divergent", "n", "bound (95%)", "assumption"], [
            [p["arm"], p["cells"], p["divergent"], p["n"], f"{_pct(p['lower_bound_95'])}-{_pct(p['upper_bound_95'])}",
             p["assumption"]] for p in result["pooled"]])
    return "\n".join(out)


def _sweep_section(sweep: dict[str, Any]) -> list[str]:
    keys = sweep["swept_keys"]
    out = ["## Sweep", "", f"Swept keys: {', '.join(keys) or '(none)'}", ""]
    out += _table(["job", *keys], [[job["arm"], *(job["overrides"].get(k, "") for k in keys)]
                                   for job in sweep["jobs"].values()])
    pairs = sweep["single_variable_pairs"]
    out += [f"Single-variable pairs: {len(pairs)}", ""]
    out += [f"- {p['a']} vs {p['b']}: only `{p['key']}` differs" for p in pairs]
    return [*out, ""]


def _plots(result: dict[str, Any]) -> list[str]:
    """PNG images (base64) of per-position spread and distinct counts; [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    images = []
    for key, label in (("prompt_spread", "prompt position"), ("generated_spread", "generated position")):
        series = [p for p in result["positions"] if p.get(key)]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(9, 3.2))
        for p in series:
            values = [float("nan") if v is None else v for v in p[key]]
            ax.plot(values, label=f"{p['arm']} / {p['prompt_id']} / {p['phase']}", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel("logprob spread (max - min)")
        ax.legend(fontsize=6, loc="upper left")
        images.append(_png(fig, plt))
    cells = result["cells"]
    if cells:
        fig, ax = plt.subplots(figsize=(9, 0.3 * len(cells) + 1))
        labels = [f"{c['arm']} / {c['prompt_id']} / {c['phase']}" for c in cells]
        ax.barh(labels, [c["distinct_signatures"] or 0 for c in cells])
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


def to_html(result: dict[str, Any]) -> str:
    """Self-contained: the Markdown tables as HTML tables, plots inlined as PNG."""
    body = []
    in_table = False
    for line in markdown(result).splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()).replace("**", "") for c in line.strip("|").split("|")]
            if set("".join(cells)) <= {"-", " "}:
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
    plots = _plots(result)
    body += ["<h2>Plots</h2>", *(f'<img alt="plot" src="data:image/png;base64,{p}">' for p in plots)] if plots \
        else ["<p>(plots need matplotlib: pip install 'orchestrator[report]')</p>"]
    style = ("body{font-family:sans-serif;margin:2em;max-width:1200px} table{border-collapse:collapse;"
             "margin-bottom:1em;font-size:13px} td,th{border:1px solid #ccc;padding:2px 6px} img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(result['study'])}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
