"""The page's opening (three lines per arm: does it start, does it stay correct, what does it cost) and the
cost sections of report.md (report.html renders the same Markdown): cost per load point, ratios against the
other arm of each pair, divergence rates compared, the probes' co-residents. Against offered load: frontier_md.py."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.analysis.coresidents import MISSED
from orchestrator.analysis.cost import stays_correct
from orchestrator.analysis.cost_results import (
    CoResidents,
    CostRatio,
    CostReport,
    Metric,
    PhaseCost,
    PhaseWorkload,
    RateComparison,
    StartsSummary,
)
from orchestrator.analysis.results import Cell
from orchestrator.config.noise_floor import copy_name
from orchestrator.errors import counted
from orchestrator.report import saturation_md
from orchestrator.report.table import compact, markdown_table, num, pct, seconds, size

RATIO_WORDS = {"request_throughput_per_s": "throughput", "output_tokens_per_s": "output tokens/s",
               "latency_s": "latency", "time_to_first_token_s": "time to first token",
               "inter_token_latency_s": "inter-token latency", "time_to_ready_s": "time to ready",
               "peak_memory_bytes": "peak memory", "peak_gpu_memory_bytes": "peak GPU memory"}
OPENING_RATIOS = ("request_throughput_per_s", "latency_s", "time_to_first_token_s")


def starts_line(s: StartsSummary | None) -> str:
    if s is None or not s.starts:
        return "Starts: not recorded"
    if s.starts == 1:
        text = f"Starts: {s.ready} of 1 (one start: `study.starts: N` measures the failure rate)"
    else:
        failed = (s.starts - s.ready) / s.starts
        text = (f"Starts: {s.ready} of {s.starts} (failure rate {pct(failed)}, at most {pct(s.failure_upper_95)} at "
                "95 %)")
    ready = s.time_to_ready_s
    if ready.count == 1:
        text += f"; time to ready {seconds(ready.avg)}"
    elif ready.count:
        text += f"; time to ready {seconds(ready.p50)} ({seconds(ready.min)[:-2]}-{seconds(ready.max)})"
    alike = [p for p, n in s.signatures_across_starts.items() if n == 1]
    differ = {p: n for p, n in s.signatures_across_starts.items() if n > 1}
    if s.signatures_across_starts:
        text += f"; first answers alike across starts for {len(alike)} of {len(s.signatures_across_starts)} prompts"
        text += "".join(f" ({p}: {counted(n, 'signature')})" for p, n in differ.items())
    return text


def _co_residents(found: list[CoResidents]) -> str:
    seen = [c for c in found if c.least is not None]
    if not found:
        return ""
    if not seen:
        if any(c.source == MISSED for c in found):
            return ", co-residents not observed (no /metrics sample while a probe was in flight showed it running)"
        return ", co-residents not observable (no server trace, no /metrics)"
    least, most = min(c.least or 0 for c in seen), max(c.most or 0 for c in seen)
    sources = " and ".join(sorted({c.source for c in seen}))
    probes, observed = sum(c.probes for c in found), sum(c.observed or 0 for c in seen)
    share = f"; {observed} of {counted(probes, 'probe')} observed" if observed < probes else ""
    others = counted(least, "other request") if least == most else f"{least}-{most} other requests"
    return f", each alongside {others} ({sources}{share})"


def _against(rates: list[RateComparison], arm: str, phase: str) -> str:
    """The arm's divergence rate against the other arm of its pair at this phase: pooled over the prompts where
    there are several, else the one cell."""
    mine = [r for r in rates if r.arm_b == arm and r.phase == phase]
    rate = next((r for r in mine if r.prompt_id == "*"), mine[0] if len(mine) == 1 else None)
    if rate is None:
        return ""
    return (f"; against {other_arm(rate.arm_a, arm)}: {rate.verdict} ({rate.difference:+.3f}, {rate.lower_95:+.3f} to "
            f"{rate.upper_95:+.3f}, Fisher p = {rate.p_two_sided:.2g})")


def other_arm(arm_a: str, arm_b: str) -> str:
    """Whom B's line is read against: A by name, and, where B is A started again (study.noise_floor), that
    the two are the A/A."""
    return f"{arm_a} (its A/A: the same config started again)" if arm_b == copy_name(arm_a) else arm_a


def flips(cells: list[Cell]) -> str:
    """The cells' top-1 flips in all: '12 at 5 positions'; '' where none flipped or none had tokens."""
    flipped = [c for c in cells if c.top1_flips]
    if not flipped:
        return ""
    positions = sum(c.top1_flip_position_count or 0 for c in flipped)
    total, where = sum(c.top1_flips or 0 for c in flipped), f" over {len(flipped)} cells" if len(flipped) > 1 else ""
    return f"{counted(total, 'top-1 flip')} at {counted(positions, 'position')}{where}"


def correct_lines(cells: list[Cell], arm: str, phases: list[PhaseCost], co: list[CoResidents],
                  rates: list[RateComparison] | None = None) -> list[str]:
    def bound(k: int, n: int, low: float, high: float) -> str:
        return f"at most {pct(high)}" if k == 0 else f"rate {pct(low)}-{pct(high)} at 95 %"

    if not phases:
        k, n, low, high, count = stays_correct(cells, arm)
        if not n:
            return ["Stays correct: not measured: no successful response"]
        flipped = flips([c for c in cells if c.arm == arm])
        # cells stopped once they diverged (stop_after_divergences) are left out of the pooled rate, not unsaid
        stopped = sum(c.arm == arm and c.stopped_after is not None for c in cells)
        return [f"Stays correct: {k} of {n} warm requests diverged over {count} cells ({bound(k, n, low, high)})"
                + (f"; {counted(stopped, 'more cell')} diverged and stopped early, left out of this rate"
                   if stopped else "") + (f"; {flipped}" if flipped else "")]
    parts, divergent, probes = [], 0, 0
    for phase in phases:
        k, n, low, high, _ = stays_correct(cells, arm, phase.phase)
        divergent, probes = divergent + k, probes + n
        where = phase.load_point or phase.phase
        mine = [c for c in co if c.arm == arm and c.phase == phase.phase]
        flipped = flips([c for c in cells if c.arm == arm and c.phase == phase.phase])
        text = f"{k} of {n} probes diverged ({bound(k, n, low, high)})" + (f", {flipped}" if flipped else "")
        parts.append((where, text, _co_residents(mine), _against(rates or [], arm, phase.phase)))
    if len(parts) == 1:
        where, text, co_text, against = parts[0]
        return [f"Stays correct: {text} at {where}{co_text}{against}"]
    alike = {co_text for _, _, co_text, _ in parts}
    shared = alike.pop() if len(alike) == 1 else ""  # said once, on the line over the load points
    return [f"Stays correct: {divergent} of {probes} probes diverged over {len(parts)} load points{shared}:",
            *(f"  - at {where}: {text}{'' if shared else co_text}{against}" for where, text, co_text, against in parts)]


def _ratio(r: CostRatio) -> str:
    if r.ratio is None:
        return f"{RATIO_WORDS[r.metric]} no ratio ({r.note})"
    interval = f" [{compact(r.lower_95)}, {compact(r.upper_95)}]" if r.lower_95 is not None \
        and r.upper_95 is not None else " (no interval: one window)"
    return f"{RATIO_WORDS[r.metric]} ×{compact(r.ratio)}{interval}"


def _p(metric: Metric, what: str) -> str:
    return f"p50 {what} {seconds(metric.p50)}" if metric.count else f"{what} {metric.note}"


def _why(note: str, what: str) -> str:
    """Why `what` ("memory", "GPU memory") has no peak, from the arm's memory_note (run/arm/resources.py writes
    'memory: ..., every 0.5 s; GPU memory: ...')."""
    for part in note.split("; "):
        if part.startswith(f"{what}: "):
            return part.removeprefix(f"{what}: ").split(", every ")[0]
    return "not observable: not sampled"


def memory(s: StartsSummary | None) -> str:
    """'peak memory 1.2 GiB, GPU 3.4 GiB' (the highest over starts), or why either is missing."""
    if s is None:
        return "memory not recorded"
    ram = f"peak memory {size(s.peak_memory_bytes.max)}" if s.peak_memory_bytes.count else \
        f"memory {_why(s.memory_note, 'memory')}"
    gpu = _why(s.memory_note, "GPU memory")
    gpu = f"GPU {size(s.peak_gpu_memory_bytes.max)}" if s.peak_gpu_memory_bytes.count else \
        "no GPU" if gpu.startswith("none") else f"GPU memory {gpu}"
    return f"{ram}, {gpu}"


def peaks(s: StartsSummary | None) -> list[str]:
    """The table's two memory cells: the peak, or why there is none."""
    if s is None:
        return ["not recorded", "not recorded"]
    return [size(m.max) if m.count else _why(s.memory_note, what)
            for m, what in ((s.peak_memory_bytes, "memory"), (s.peak_gpu_memory_bytes, "GPU memory"))]


def costs_lines(arm: str, phases: list[PhaseCost], ratios: list[CostRatio], start: StartsSummary | None = None,
                workloads: Sequence[PhaseWorkload] = ()) -> list[str]:
    """One load point: a line, the arm's memory in it; several: the memory, then a sub-bullet per load point;
    a load point whose workload is thin (analysis/variety.py) ends with a warning saying so."""
    if not phases:
        return [f"Costs: not measured: no load phase recorded; {memory(start)}"]
    thin = {(w.arm, w.phase): w.warning for w in workloads if w.warning}
    parts = []
    for c in phases:
        added = counted(len(c.steady.windows_added), "window")
        if not c.steady.steady:  # numbers of a moving server are not its cost
            parts.append((f"at {c.load_point or c.phase}: {c.steady.note.split('; ')[-1]}: not steady"
                          + f" with {added} added" * bool(c.steady.windows_added) + "; warm up longer (load.warmup)",
                          ""))
            continue
        kept_out = [f"{c.steady.requests_kept_out} kept out as warm-up"] * bool(c.steady.requests_kept_out) + \
            [f"{added} added until steady"] * bool(c.steady.windows_added)
        numbers = (f"at {c.load_point or c.phase}: {num(c.request_throughput_per_s.avg, 2)} req/s, "
                   f"{num(c.output_tokens_per_s.avg, 3)} tokens/s, {_p(c.latency_s, 'latency')}, "
                   f"{_p(c.time_to_first_token_s, 'time to first token')}, errors {c.errors} of {c.requests}"
                   + (f" ({', '.join(kept_out)})" if kept_out else ""))
        mine = [r for r in ratios if r.arm_b == arm and r.phase == c.phase and r.metric in OPENING_RATIOS
                and r.ratio is not None]
        against = ", ".join(_ratio(r) for r in mine)
        if any(r.note.endswith("not steady") for r in mine):
            against = f"{mine[0].arm_a} not steady: no interval"
        warning = thin.get((c.arm, c.phase))
        parts.append((numbers, (f"; against {other_arm(mine[0].arm_a, arm)}: {against}" if mine else "")
                      + (f"; warning: {warning}" if warning else "")))
    if len(parts) == 1:
        numbers, against = parts[0]
        return [f"Costs {numbers}; {memory(start)}{against}"]
    return [f"Costs: {memory(start)}; per load point:", *(f"  - {numbers}{against}" for numbers, against in parts)]


def opening(cost: CostReport | None, cells: list[Cell], arms: list[str]) -> list[str]:
    """Three lines per arm, before anything else, in the study's order (cost's); a line over several load points
    has a sub-bullet for each."""
    if cost is None:
        return []
    starts = {s.arm: s for s in cost.starts}
    out = ["## Per arm: does it start, does it stay correct, what does it cost", ""]
    for arm in dict.fromkeys([*starts, *arms]):
        phases = [c for c in cost.phases if c.arm == arm]
        lines = [starts_line(starts.get(arm)), *correct_lines(cells, arm, phases, cost.co_residents, cost.rates),
                 *costs_lines(arm, phases, cost.ratios, starts.get(arm), cost.workloads),
                 *saturation_md.opening_lines(cost, arm)]
        out += [f"- **{arm}**", *(f"  {line}" if line.startswith("  - ") else f"  - {line}" for line in lines)]
    return [*out, ""]


def _spread(m: Metric) -> str:
    return m.note or "-" if not m.count else f"{num(m.p50)} / {num(m.p90)} / {num(m.p99)}"


def sections(cost: CostReport | None, cells: list[Cell]) -> list[str]:
    if cost is None or not (cost.phases or cost.rates or any(s.starts > 1 for s in cost.starts)):
        return []
    out: list[str] = []
    if any(s.starts > 1 for s in cost.starts):
        out += ["## Starts", ""]
        out += markdown_table(["arm", "starts", "ready", "failure rate at most (95 %)", "time to ready p50 (s)",
                               "min-max (s)", "peak memory", "peak GPU memory", "model", "revision"], [
            [s.arm, str(s.starts), str(s.ready), pct(s.failure_upper_95), num(s.time_to_ready_s.p50),
             f"{num(s.time_to_ready_s.min)}-{num(s.time_to_ready_s.max)}", size(s.peak_memory_bytes.max),
             size(s.peak_gpu_memory_bytes.max), s.model or "-", s.model_revision or "-"] for s in cost.starts])
    if cost.phases:
        out += ["## Cost per load point", "",
                "Over the steady part of the phase (probes and background; its warm-up and the requests MSER-5 "
                "finds before the server settled are kept out, docs/load.md). Throughput: completed "
                "requests over each window's first send to last answer, pooled over the windows (their range "
                "beside it). Latencies are p50 / p90 / p99 over requests, in seconds; time to first token and "
                "inter-token latency only from streamed requests. Send lateness: actual less scheduled send. "
                "Memory: the arm's peaks over its whole run (every load point; the highest over starts).", ""]
        starts = {s.arm: s for s in cost.starts}
        out += markdown_table(["arm", "load point", "steady", "windows", "requests", "kept out",
                               "req/s (windows' range)", "tokens/s", "latency", "time to first token",
                               "inter-token latency", "errors", "send lateness p99", "peak memory",
                               "peak GPU memory"], [
            [c.arm, c.load_point or c.phase, _steady(c), str(c.windows), str(c.requests), _kept_out(c),
             f"{num(c.request_throughput_per_s.avg)} ({num(c.request_throughput_per_s.min)}-"
             f"{num(c.request_throughput_per_s.max)})", num(c.output_tokens_per_s.avg), _spread(c.latency_s),
             _spread(c.time_to_first_token_s), _spread(c.inter_token_latency_s),
             f"{c.errors} ({pct(c.error_share)})", num(c.send_lateness_s.p99), *peaks(starts.get(c.arm))]
            for c in cost.phases])
    if cost.ratios:
        out += ["## What B costs against A", "",
                "The ratio B/A over the replicates (the load point's counted windows; for time to ready and "
                "memory, the starts) with a 95 % interval: paired where A's and B's windows sent one schedule (t on "
                "the pairs' log ratios), else Welch's t on the logs; the method column says which (docs/load.md). "
                + ("The A/A of the baseline (two starts of one config) is the cost's noise floor."
                   if any(r.arm_b == copy_name(r.arm_a) for r in cost.ratios) else
                   "No A/A gives this study a cost noise floor (`study.noise_floor: true` adds one)."), ""]
        out += markdown_table(["A", "B", "load point", "metric", "B/A", "95 % interval", "replicates A, B", "method",
                               "note"], [
            [r.arm_a, r.arm_b, r.phase or "(the arm)", RATIO_WORDS[r.metric], num(r.ratio),
             f"{r.lower_95:.3g}-{r.upper_95:.3g}" if r.lower_95 is not None and r.upper_95 is not None else "-",
             f"{r.replicates_a}, {r.replicates_b}", r.method.split(":")[0].split(" (")[0], r.note or "-"]
            for r in cost.ratios])
    if cost.rates:
        out += ["## Divergence rates compared", "",
                "B's divergence rate less A's per cell (prompt `*`: the phase's cells pooled, assuming one rate "
                "across them), with Newcombe's hybrid score interval (95 %) and Fisher's exact test: lower when the "
                "interval lies wholly below 0, higher when wholly above, else not shown lower.", ""]
        out += markdown_table(["A", "B", "prompt", "phase", "A: k of n", "B: k of n", "difference", "95 % interval",
                               "p (B lower)", "p (two-sided)", "verdict"], [
            [r.arm_a, r.arm_b, r.prompt_id, r.phase, f"{r.k_a} of {r.n_a}", f"{r.k_b} of {r.n_b}",
             f"{r.difference:+.3f}", f"{r.lower_95:+.3f} to {r.upper_95:+.3f}", num(r.p_lower),
             num(r.p_two_sided), r.verdict] for r in cost.rates])
    if cost.co_residents:
        out += ["## Probes' co-residents under load", "",
                "Other requests of the arm that ran alongside each probe: from the server's trace (engine steps "
                "that overlap), else its /metrics sampled while the probe was in flight (a probe no sample showed "
                "running has no count: not observed), else not observable.", ""]
        out += markdown_table(["arm", "prompt", "phase", "probes", "observed", "least", "median", "most", "from"], [
            [c.arm, c.prompt_id, c.phase, str(c.probes), num(c.observed), num(c.least), num(c.median),
             num(c.most), c.source] for c in cost.co_residents])
    return out


def _steady(c: PhaseCost) -> str:
    return "yes" if c.steady.steady else f"no: {c.steady.note.split('; ')[-1]}"


def _kept_out(c: PhaseCost) -> str:
    """'9 (window 0 whole)': the requests MSER-5 left out as warm-up, and the windows wholly so."""
    whole = ", ".join(map(str, c.steady.windows_kept_out))
    added = f"; windows {', '.join(map(str, c.steady.windows_added))} added" * bool(c.steady.windows_added)
    return ("-" if not c.steady.steady else f"{c.steady.requests_kept_out}" + (f" (window {whole} whole)" * bool(whole))
            ) + added
