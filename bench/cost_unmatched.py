"""The A/A whose schedules differ (bench/cost_calibration.py --unmatched; docs/benchmarks.md, "The cost's
intervals: coverage"). Per trial, two runs of the calibration study's baseline alone (no A/A copy, no `slow`)
start side by side, one at load.seed K and one at K + OTHER_SEED: one config, one moment of the machine, but no
window of one sends what the other's sends, so the cost cannot pair them (as two runs compared together, or two
loads). Each metric's interval both ways on the same two records: Welch's t on the windows' logs (what the cost
takes: pairing.window_ratio), and the block bootstrap over the steady requests (bench/block_bootstrap.py;
throughput is per window: Welch only); then per metric and method how many hold 1 and their median width."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from pathlib import Path

from block_bootstrap import Series, ratio, request_series

from orchestrator.analysis import pairing
from orchestrator.analysis.cost import counted_cost, load_groups
from orchestrator.analysis.cost_results import PhaseCost
from orchestrator.record.paths import RunPaths

METRICS = ("request_throughput_per_s", "latency_s", "time_to_first_token_s")
PHASE, ARM = "load", "baseline"
OTHER_SEED = 1000  # B's load.seed: A's plus this
ONE_ARM = ["study.noise_floor=false", "~arms.slow", "study.variables={}"]
Runner = Callable[[int, Path, Path, list[str]], None]  # cost_calibration._run: (seed, run dir, work dir, extra)


def run_pair(seed: int, work_dir: Path, run: Runner, reuse: bool) -> tuple[Path, Path]:
    """The trial's two runs, started together (each one's report.json read again where `reuse` finds it)."""
    dirs = work_dir / f"unmatched-{seed}-a", work_dir / f"unmatched-{seed}-b"
    threads = [threading.Thread(target=run, args=(s, d, work_dir, ONE_ARM))
               for s, d in zip((seed, seed + OTHER_SEED), dirs, strict=True)
               if not (reuse and (d / "report.json").is_file())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dirs


def _arm(run_dir: Path) -> tuple[PhaseCost, dict[str, Series]]:
    rows = load_groups(RunPaths(run_dir))[(ARM, PHASE)]
    found, kept = counted_cost(ARM, PHASE, rows)
    return found, request_series(rows, kept)


def _show(found: pairing.Ratio) -> str:
    if found.value is None or found.lower is None or found.upper is None:
        return f"none ({found.note})"
    return f"{found.value:.3f} [{found.lower:.3f}, {found.upper:.3f}]"


def unmatched_lines(work_dir: Path, trials: int, run: Runner, reuse: bool) -> list[str]:
    """A line per trial (each metric's intervals; printed as it comes), then per metric and method how many hold 1
    (a trial with a side not steady counts as a miss: the cost gives it no interval) and their median width."""
    held: dict[tuple[str, str], int] = {}
    widths: dict[tuple[str, str], list[float]] = {}
    for seed in range(trials):
        (a, series_a), (b, series_b) = (_arm(d) for d in run_pair(seed, work_dir, run, reuse))
        steady = a.steady.steady and b.steady.steady
        parts = []
        for metric in METRICS:
            found = {"welch": pairing.window_ratio(a.window_ids, a.per_window[metric], a.schedules, b.window_ids,
                                                   b.per_window[metric], b.schedules)}
            if metric in series_a:
                found["bootstrap"] = ratio(series_a[metric], series_b[metric])
            for method, r in found.items():
                given = r.lower is not None and r.upper is not None
                held[(metric, method)] = held.get((metric, method), 0) + bool(
                    steady and given and (r.lower or 0) <= 1 <= (r.upper or 0))
                widths.setdefault((metric, method), []).extend([(r.upper or 0) / (r.lower or 1)] if given else [])
            parts.append(f"{metric} " + ", ".join(f"{m} {_show(r)}" for m, r in found.items()))
        tail = "" if steady else "; a side not steady: counted as a miss"
        print(f"unmatched A/A seed={seed} / seed={seed + OTHER_SEED}: {'; '.join(parts)}{tail}", flush=True)
    return [f"unmatched A/A {metric} {method}: {count} of {trials} intervals hold 1; median width (upper / lower) "
            f"{statistics.median(widths[(metric, method)]):.3f}" for (metric, method), count in held.items()]
