"""report.md: the verdict (a sentence per question, the gate, the guard), the environment, then one section
per question, as tables.
The wording never says "deterministic": it says how many distinct in how many, and the bound on the
divergence rate that this sample supports."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.analysis.batches import NOT_OBSERVED
from orchestrator.analysis.results import BASIS_WORDS, BatchCheck, Cell, Comparison, Divergence, WaveTime
from orchestrator.analysis.stats import ALPHA
from orchestrator.config.noise_floor import copy_name
from orchestrator.errors import counted
from orchestrator.report import (
    control_md,
    cost_md,
    decode_prefill_md,
    explorer_md,
    frontier_md,
    locate,
    prefix_cache_md,
    side_effects_md,
)
from orchestrator.report.environment import markdown_section as environment_section
from orchestrator.report.guard import markdown_section
from orchestrator.report.headline import COMPARED_ON, compared_on, stopped_rate, unobserved
from orchestrator.report.probes import render_attribution, render_markdown

if TYPE_CHECKING:
    from orchestrator.report.model import StudyReport


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def rate(cell: Cell) -> str:
    if cell.distinct_signatures is None:
        return cell.signature_note or "n/a"
    if cell.stopped_after is not None:
        return stopped_rate(cell)
    if cell.divergent == 0:
        return f"divergence rate <= {_pct(cell.upper_bound_95)} (95%)"
    return (f"{cell.divergent} divergent in {cell.n}; rate {_pct(cell.lower_bound_95)}"
            f"-{_pct(cell.upper_bound_95)} (95%)")


def _where(cell: Cell) -> str:
    pos = cell.first_divergent_position
    if pos is None:
        return "-"
    gap = cell.top1_top2_gap
    tie = " (near-tie flip)" if cell.near_tie else ""
    return f"token {pos}, gap {gap:.3g}{tie}" if gap is not None else f"token {pos}"


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def cells_table(comparison: Comparison) -> str:
    lines = ["| arm | prompt | phase | n | distinct completions | distinct signatures | rate | first divergence | "
             "top-1 flips |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in comparison.cells:
        sigs = "n/a" if c.distinct_signatures is None else f"{c.distinct_signatures} in {c.n}"
        if c.distinct_signatures is not None and c.signature_basis != "top_logprobs":
            sigs += f" ({c.signature_basis.replace('_', ' ')})"
        errors = f" (+{c.errors} errors)" if c.errors else ""
        lines.append(f"| {c.arm} | {c.prompt_id} | {c.phase} | {c.n}{errors} | "
                     f"{c.distinct_completions} in {c.n} | {sigs} | {rate(c)} | {_where(c)} | {top1_flips(c)} |")
    return "\n".join(lines)


def top1_flips(cell: Cell) -> str:
    """'12 at 5 positions (first: 3, 4, 9)'; '-' where the engine returned no tokens to compare."""
    if cell.top1_flips is None:
        return "-"
    if not cell.top1_flips:
        return "0"
    count = cell.top1_flip_position_count or 0
    listed = [str(position) for position, _ in (cell.top1_flip_positions or [])[:3]]
    more = ", ..." if count > len(listed) else ""
    if count == 1:
        return f"{cell.top1_flips} at position {listed[0]}"
    return f"{cell.top1_flips} at {count} positions (first: {', '.join(listed)}{more})"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(str(v) for v in row) + " |" for row in rows), ""]


def headline(comparison: Comparison, why: Mapping[str, str] | None = None) -> str:
    varying = [c for c in comparison.cells if c.distinct_signatures not in (None, 1)]
    parts = [f"{len(varying)} of {len(comparison.cells)} cells show more than one signature"]
    differ = [s for s in comparison.schedules if s.verdict == "differ"]
    if differ:
        parts.append(counted(len(differ), "schedule comparison differs", "schedule comparisons differ"))
    cold = [c for c in comparison.cold if c.matches_warm is False]
    if cold:
        parts.append(f"{len(cold)} of {len(comparison.cold)} cold first requests differ from warm")
    pairs = [p for p in comparison.pairs if p.verdict == "differ"]
    if pairs:
        kinds = "/".join(sorted({"A/A" if p.arm_b == copy_name(p.arm_a) else "A/B" for p in comparison.pairs},
                                reverse=True))
        parts.append(f"{len(pairs)} of {len(comparison.pairs)} pair comparisons ({kinds}) differ")
    not_co = [b for b in comparison.batches if b.co_resident is False]
    if not_co:
        parts.append(f"{len(not_co)} of {len(comparison.batches)} concurrent batches were not co-resident "
                     "(kept out of the verdict)")
    missed = [b for b in comparison.batches if b.together_source == NOT_OBSERVED]
    if missed:
        parts.append(f"{len(missed)} of {len(comparison.batches)} concurrent batches' co-residency was not observed "
                     "(no /metrics sample showed them running; kept out of the verdict)")
    line = "; ".join(parts) + "."
    measured = [c for c in comparison.cells if c.distinct_signatures is not None]
    if measured and not varying and not differ and not cold:
        line += " " + no_difference(measured, len(pairs), why)
    return line


def no_difference(cells: list[Cell], pairs_differ: int = 0, why: Mapping[str, str] | None = None) -> str:
    """An honest negative: what was not seen, the bound the sample supports, and the co-residency reached;
    where pairs of arms differ all the same, it says the arms are repeatable and the A/B differs."""
    loosest = max(cells, key=lambda c: c.upper_bound_95 or 0.0)
    bold = "**Each arm repeatable, the arms differ**" if pairs_differ else "**No difference observed**"
    basis = compared_on([c.signature_basis for c in cells])
    least, most = min(c.n for c in cells), max(c.n for c in cells)
    text = (f"{bold}: one signature in each of {counted(len(cells), 'cell')}{f', {basis}' if basis else ''} (n = "
            f"{least if least == most else f'{least}-{most}'} each; divergence rate <= "
            f"{_pct(loosest.upper_bound_95)} at 95%{' in the smallest' if least != most else ''}).")
    concurrent = [c for c in cells if c.batch_size is not None]
    if concurrent:
        reached = [c for c in concurrent if c.co_resident]
        seen = [c.min_running_observed for c in concurrent if c.min_running_observed is not None]
        capacities = ", ".join(sorted({str(c.capacity or "unknown") for c in concurrent}))
        missed = sum(c.batches_not_observed or 0 for c in concurrent)
        together = f"at least {min(seen)} running together" if seen else \
            "how many ran together was not observed (no /metrics sample showed a batch running)" if missed else \
            f"how many ran together is not observable ({unobserved(concurrent, why)})"
        observed = [c for c in concurrent if c.co_resident is not None]
        share = f"{len(reached)} of {len(concurrent)}" if observed else "not observable"  # never 0 for unknown
        text += (f" Concurrent cells co-resident: {share} (batches of "
                 f"{min(c.batch_size or 0 for c in concurrent)}, {together}; capacity {capacities}).")
    return text


def markdown(report: StudyReport) -> str:
    return "\n".join([*title(report), *front(report), *environment_section(report.environment),
                      *_timings(report), *explorer_md.section(report.comparison),
                      *locate.section(report.comparison.inside), *details(report)])


def timings_line(seconds: dict[str, float], waves: Sequence[WaveTime] = ()) -> str:
    """'compose and check 0.41 s, checks 0.00 s, ...' in the order the stages ran; with arms side by side, an
    arm's stages add up over the arms that ran at once, so each wave's wall time follows, against the sum."""
    line = ", ".join(f"{name.replace('_', ' ')} {value:.2f} s" for name, value in seconds.items())
    if "stop_behind_next_start" in seconds:  # runtime.stop_behind_next_start: not time added to the run's
        line += " (the stops behind the next start ran during the next arm's start to ready)"
    if not any(len(w.arms) > 1 for w in waves):
        return line
    each = ", ".join(f"wave {w.wave} ({', '.join(w.arms)}) {w.wall_s:.2f} s" for w in waves)
    return (f"{line} (an arm's stages summed over arms that ran at once); arms side by side in "
            f"{counted(len(waves), 'wave')}: {sum(w.wall_s for w in waves):.2f} s wall ({each}) against "
            f"{sum(w.arm_s for w in waves):.2f} s of arm time one after another")


def _timings(report: StudyReport) -> list[str]:
    if not report.timings_s:
        return []
    return ["## Where the time went", "", f"{timings_line(report.timings_s, report.waves)} (run.json "
            "`timings_s`, the waves from the arms table; start to ready and requests are the engine's, the rest "
            "the orchestrator's).", ""]


def title(report: StudyReport) -> list[str]:
    return [f"# Study `{report.study}`, run `{report.run_id}`", ""]


def front(report: StudyReport) -> list[str]:
    """What report.md opens with under its title: per arm, start, correctness and cost; then the verdict with
    the gate and the guard. `show` prints the same lines (report.json `front`), so the terminal never looks
    cleaner than the page."""
    return [*opening(report), *verdict(report)]


def opening(report: StudyReport) -> list[str]:
    """Three lines per arm, first: does it start, does it stay correct, what does it cost."""
    return cost_md.opening(report.cost, report.comparison.cells, [a.arm for a in report.arms])


def verdict(report: StudyReport) -> list[str]:
    """The answer first: a sentence per question, the overall count, the gate, the single-variable check."""
    out = ["## Verdict", "", *(f"- {line}" for line in report.headline), "",
           headline(report.comparison, report.unobserved), "", report.gate.sentence(), ""]
    if report.guard:
        out += [*markdown_section(report.guard), ""]
    return out


def signature_sentence(cells: list[Cell]) -> str:
    """What the cells' signatures hash: the finest basis every response of a cell has (analysis/compare.py)."""
    used = Counter(c.signature_basis for c in cells if c.distinct_signatures is not None)
    if len(used) <= 1:
        return f"Signatures hash {BASIS_WORDS[next(iter(used), 'top_logprobs')]}."
    return "Signatures hash the finest thing every response of a cell has: " + "; ".join(
        f"{BASIS_WORDS[basis]} in {counted(n, 'cell')}" for basis, n in used.most_common()) + "."


def details(report: StudyReport) -> list[str]:
    result = report.comparison
    out: list[str] = []
    if report.sweep:
        out += _sweep_section(report.sweep)
    out += _failures_section(report)
    out += ["## Arms", ""]
    out += _table(["arm", "status", "image", "image id", "error"], [
        [a.arm, a.status, a.image_ref, (a.image_id or "")[:19],
         (a.error or "").splitlines()[0] if a.error else ""] for a in report.arms])
    out += side_effects_md.section(report.side_effects)
    out += ["## Repeatability per cell (warm requests)", "",
            f"{signature_sentence(result.cells)} Bounds are 95%: one-sided when nothing diverged, Clopper-Pearson "
            "otherwise. A first divergence whose top1-top2 gap is tiny is a near-tie flip, not by itself a kernel "
            "defect. Top-1 flips: (request, position) pairs whose token is another than the modal request's there "
            "(the seed's unit), with the first positions that have one; - where the engine returned no tokens.",
            "", cells_table(result), ""]
    collapsed = [c for c in result.cells if c.top_entries_min is not None and c.top_entries_min != c.top_entries_max]
    if collapsed:
        out += [f"Top-logprob entries per position varied in {counted(len(collapsed), 'cell')} ("
                + ", ".join(f"{c.label}: {c.top_entries_min}-{c.top_entries_max}" for c in collapsed[:6])
                + "): the server keys them by decoded string, and tokens that decode alike collapse into one "
                "entry, so these signatures can hide or invent differences. Ask for token-id keys where the "
                "arm's engine offers them (its `request_extra`; each engine's page in docs/ names the field).", ""]
    positional = [c for c in result.cells if c.max_prompt_spread is not None]
    if positional:
        out += ["## Prompt positions (prompt_logprobs)", ""]
        out += _table(["arm", "prompt", "phase", "max forced-token spread", "first position with spread",
                       "min top-1 agreement", "min top-k overlap"], [
            [c.arm, c.prompt_id, c.phase, _num(c.max_prompt_spread),
             _num(c.first_prompt_position_with_spread, "d"), _num(c.min_top1_agreement),
             _num(c.min_topk_overlap)] for c in positional])
    out += decode_prefill_md.section(report.decode_prefill)
    quality = [c for c in result.cells if c.quality_note]
    if quality:
        out += ["## Answer quality (separate from repeatability)", ""]
        out += _table(["arm", "prompt", "phase", "expectation", "passing", "distinct completions"], [
            [c.arm, c.prompt_id, c.phase, c.quality_note, _pct(c.quality_pass),
             c.distinct_completions] for c in quality])
    out += _batches_section(result, report.unobserved)
    out += cost_md.sections(report.cost, result.cells) + frontier_md.sections(report.cost, result.cells, report.sweep)
    if result.cold:
        out += ["## Cold first request vs warm repeats", ""]
        out += _table(["arm", "prompt", "phase", "cold matches warm"], [
            [c.arm, c.prompt_id, c.phase,
             {True: "yes", False: "**no**", None: "not comparable"}[c.matches_warm]] for c in result.cold])
    out += prefix_cache_md.section(report.prefix_cache)
    parity = f"Parity with the baseline `{report.baseline}`" if report.baseline else "Parity of arm pairs"
    checks: tuple[tuple[str, Sequence[Divergence], tuple[str, ...]], ...] = (
        ("Schedules within an arm", result.schedules, ("arm", "phase_a", "phase_b")),
        (parity, result.pairs, ("arm_a", "arm_b", "phase")))
    for title, rows, first in checks:
        if rows:
            out += [f"## {title}", ""]
            out += [PAIR_SENTENCE, ""]
            out += _table([*first, "prompt", "verdict", "how", "first differing token", "max prompt logprob diff"], [
                [*(getattr(r, k) for k in first), r.prompt_id, r.verdict, _how(r),
                 _num(r.first_divergent_position, "d"), _num(r.max_prompt_logprob_diff)] for r in rows])
    out += control_md.sections(result)
    if report.attribution:
        out += [render_attribution(report.attribution), ""]
    if report.probes:
        out += [render_markdown(report.probes), ""]
    if result.pooled:
        out += ["## Pooled over cells", ""]
        cells = {c.label: c for c in result.cells}
        out += _table(["arm", "cells", "divergent", "n", "bound (95%)", "assumption", "left out"], [
            [p.arm, p.cells, p.divergent, p.n, f"{_pct(p.lower_bound_95)}-{_pct(p.upper_bound_95)}" if p.n else "-",
             p.assumption, _left_out([cells[label] for label in p.left_out])] for p in result.pooled])
    return out


PAIR_SENTENCE = (f"Two cells are compared as distributions of their signatures: identical (one and the same on both "
                 f"sides), same distribution (the same signatures in the same proportions), else by an exact test of "
                 f"the two: differ at p < {ALPHA:g}, otherwise no difference shown. The first differing token is "
                 "where the modal requests of cells that differ part.")
HOW = {"identical": "one signature, the same on both sides", "same distribution": "the same signatures in the "
       "same proportions", "not comparable": "a side has no signatures"}


def _how(row: Divergence) -> str:
    """How the verdict was reached: the test and its p-value, or why none was needed; the basis if coarse."""
    how = f"{row.test}, p = {row.p_value:.3g}" if row.p_value is not None else HOW.get(row.verdict, "-")
    return how + (f"; {COMPARED_ON[row.compared_on]}" if row.compared_on in COMPARED_ON else "")


def _left_out(cells: list[Cell]) -> str:
    """The cells a pool leaves out, and why: the stop rule ended them, each a divergence shown."""
    if not cells:
        return "-"
    return (f"{counted(len(cells), 'cell')} the stop rule ended (n not fixed; divergence shown): "
            + ", ".join(f"{c.label} (rate >= {_pct(c.lower_bound_95)})" for c in cells))


def _failures_section(report: StudyReport) -> list[str]:
    """First thing after the headline: an arm that failed makes every other number suspect."""
    if not report.failures:
        return []
    out = ["## Failures", ""]
    for failure in report.failures:
        reason = (failure.error or "").splitlines()[0] if failure.error else "no error recorded"
        out += [f"- **{failure.arm}** ({failure.status}, {failure.failed_requests} of {failure.requests} requests "
                f"failed): {reason}"]
        if failure.died_at:
            out.append(f"  - first failure of the trailing run: {failure.died_at}")
        if failure.root_cause:
            out += ["  - root cause, from its log:", "", "```", *failure.root_cause, "```"]
        else:
            out.append("  - its log shows no traceback or ERROR line after its last successful response")
        out.append("")
    return out


BATCH_ROWS = 40  # the per-batch table beyond this many rows lives in report.json


def _batches_section(result: Comparison, why: Mapping[str, str] | None = None) -> list[str]:
    """Per cell, then per batch: how tightly the batch arrived, how many ran together, what failed."""
    concurrent = [c for c in result.cells if c.batch_size is not None]
    if not concurrent:
        return []
    out = ["## Concurrent batches", "",
           "A batch's requests are released together. `arrival spread` is first to last request complete at the "
           "server (from its trace, where it gives one); `together` the most of the batch running at once, from "
           "the server's trace (exact) or its /metrics sampled in flight. A batch that was not co-resident "
           "(docs/conventions.md) is kept out of its cell's n and of every verdict, and so is one whose "
           "co-residency was not observed (no /metrics sample showed it running: no count).", ""]
    out += _table(["arm", "prompt", "phase", "batch size", "capacity", "send spread (ms)", "arrival spread (ms)",
                   "together (lowest)", "co-resident", "kept out", "transport errors"], [
        [c.arm, c.prompt_id, c.phase, c.batch_size, _num(c.capacity, "d"), _num(c.max_send_spread_ms),
         _num(c.max_arrival_spread_ms), _num(c.min_running_observed, "d"), _co_resident(c, why),
         f"{c.batches_kept_out} of {c.batches}", _num(c.transport_errors, "d")] for c in concurrent])
    shown = result.batches[:BATCH_ROWS]
    out += ["Per batch:", ""]
    out += _table(["arm", "prompt", "phase", "batch", "size", "send spread (ms)", "arrival spread (ms)",
                   "together", "from", "co-resident", "errors", "transport errors"], [
        [b.arm, b.prompt_id, b.phase, b.batch_id, b.size, _num(b.send_spread_ms), _num(b.arrival_spread_ms),
         _num(b.together, "d"), b.together_source or "", _co_resident(b, why), b.errors,
         b.transport_errors] for b in shown])
    if len(result.batches) > len(shown):
        out += [f"... {len(result.batches) - len(shown)} more batches in report.json (`batches`).", ""]
    return out


def _co_resident(batch: Cell | BatchCheck, why: Mapping[str, str] | None) -> str:
    co_resident = batch.co_resident
    missed = batch.together_source == NOT_OBSERVED if isinstance(batch, BatchCheck) else \
        bool(batch.batches_not_observed) and batch.batches_not_observed == batch.batches
    if missed:
        return "not observed (no /metrics sample showed it running; kept out)"
    if co_resident is None:
        return f"not observable ({unobserved([batch], why)})"
    size = batch.batch_size if isinstance(batch, Cell) else batch.size
    state = "yes" if co_resident else "**no**"
    if batch.capacity is not None and size is not None and size > batch.capacity:
        return f"batch of {size} on capacity {batch.capacity}: queued ({state}, {batch.capacity} at once)"
    return state


def _sweep_section(sweep: dict[str, Any]) -> list[str]:
    keys = sweep["swept_keys"]
    out = ["## Sweep", "", f"Swept keys: {', '.join(keys) or '(none)'}", ""]
    out += _table(["job", *keys], [[job["arm"], *(job["overrides"].get(k, "") for k in keys)]
                                   for job in sweep["jobs"].values()])
    pairs = sweep["single_variable_pairs"]
    out += [f"Single-variable pairs: {len(pairs)}", ""]
    out += [f"- {p['a']} vs {p['b']}: only `{p['key']}` differs" for p in pairs]
    return [*out, ""]
