"""Do the cost's intervals cover? (issue 47; docs/load.md, "Reading the cost"). Each trial is one real run of
conf/study/load_calibration.yaml on the reference engine (Docker), arms side by side: its A/A (the baseline
started again) and a planted cost (every engine step PLANTED_MS slower in `slow`), at the default load point of
conf/protocol/load.yaml, each trial with its own load.seed. It prints every trial's ratios and then the coverage:

- A/A: how many intervals hold 1, for throughput, latency and time to first token (the goal: 38 of 40);
- planted: how many inter-token latency intervals hold the true ratio (the goal: 19 of 20), and how many
  exclude 1. Each gap of `slow` is the baseline's gap plus PLANTED_MS (refengine's --step-delay-ms: one engine
  step more per token), so the true ratio is the geometric mean of (gap + PLANTED_MS) / gap over the baseline's
  windows, every trial's pooled (about 2: the baseline's step is 10 ms of sleep and the engine's own work).

    .venv/bin/python bench/cost_calibration.py --trials 40          # about 20 s a trial
    .venv/bin/python bench/cost_calibration.py --trials 2 --work-dir /tmp/cal
    .venv/bin/python bench/cost_calibration.py --trials 30 --unmatched --work-dir /tmp/cal    # 30 pairs of runs

--unmatched runs, in place of the trials above, the A/A whose schedules differ (bench/cost_unmatched.py): per
trial two runs of the baseline side by side at two load.seeds, so no window pairs; the coverage of Welch's and of
the block bootstrap's intervals on the same runs.

`--planted recording`: a planted cost whose truth is known exactly instead (bench/planted_recording.py: a
recording server with a known service time, and twice it; no Docker), counted the same way: per load point and
metric, how many intervals hold the true ratio, and the client's overhead beside it.

    .venv/bin/python bench/cost_calibration.py --planted recording --trials 40     # about 25 s a trial
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import planted_recording  # noqa: E402

T = TypeVar("T")
PLANTED_MS = 11.0  # conf/study/load_calibration.yaml: slow's --step-delay-ms less the baseline's
AA_METRICS = ("request_throughput_per_s", "latency_s", "time_to_first_token_s")
PLANTED_METRIC = "inter_token_latency_s"


@dataclass
class Interval:
    ratio: float
    lower: float
    upper: float
    method: str

    def holds(self, value: float) -> bool:
        return self.lower <= value <= self.upper


@dataclass
class Trial:
    seed: int
    aa: dict[str, Interval | None]  # None: no interval (not steady, or one window)
    planted: Interval | None
    baseline_gaps_s: list[float]  # the baseline's windows' mean inter-token gaps: the planted truth's base
    slow_gaps_s: list[float]
    not_steady: list[str]


def intervals(cost: dict[str, Any], arm: str, phase: str) -> dict[str, Interval | None]:
    """report.json's cost: `arm`'s ratios at the load point `phase`, per metric (None: no interval)."""
    return {r["metric"]: None if r["lower_95"] is None else Interval(r["ratio"], r["lower_95"], r["upper_95"],
                                                                      r["method"])
            for r in cost["ratios"] if r["arm_b"] == arm and r["phase"] == phase}


def not_steady(cost: dict[str, Any]) -> list[str]:
    return [p["arm"] + (f" ({p['phase']})" if p["phase"] != "load" else "")
            for p in cost["phases"] if not p["steady"]["steady"]]


def run_trial(seed: int, work_dir: Path, extra: list[str] | None = None, reuse: bool = False) -> Trial:
    """One run of the calibration study at `seed`; its report's ratios (`reuse`: an earlier run's report there,
    read again)."""
    run_dir = work_dir / f"trial-{seed}"
    if not (reuse and (run_dir / "report.json").is_file()):
        _run(seed, run_dir, work_dir, extra or [])
    cost = json.loads((run_dir / "report.json").read_text())["cost"]
    aa = intervals(cost, "baseline_aa", "load")
    gaps = {p["arm"]: [g for g in p["per_window"][PLANTED_METRIC] if g is not None] for p in cost["phases"]}
    return Trial(seed, {m: aa[m] for m in AA_METRICS}, intervals(cost, "slow", "load")[PLANTED_METRIC],
                 gaps["baseline"], gaps["slow"], not_steady(cost))


def _run(seed: int, run_dir: Path, work_dir: Path, extra: list[str]) -> None:
    command = [sys.executable, "-m", "orchestrator", "run", "study=load_calibration",
               f"protocol.phases.load.load.seed={seed}", f"hydra.run.dir={run_dir}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=work_dir, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trial {seed} failed ({done.returncode}): {done.stderr[-2000:]}")


def planted_truth(trials: list[Trial]) -> float:
    gaps = [g for t in trials for g in t.baseline_gaps_s]
    return math.exp(sum(math.log((g + PLANTED_MS / 1000) / g) for g in gaps) / len(gaps))


def pooled_ratio(trials: list[Trial]) -> float:
    """The geometric means' ratio over every trial's windows: what the trials' estimates aim at, measured."""
    def mean_log(values: list[float]) -> float:
        return sum(math.log(v) for v in values) / len(values)
    return math.exp(mean_log([g for t in trials for g in t.slow_gaps_s])
                    - mean_log([g for t in trials for g in t.baseline_gaps_s]))


def held(found: list[Interval | None], truth: float) -> str:
    """How many of `found` hold `truth` (a trial without an interval counts as a miss): the one count of both modes."""
    hits = sum(1 for i in found if i is not None and i.holds(truth))
    return f"{hits} of {len(found)} intervals hold {truth:.4g} ({sum(i is None for i in found)} without an interval)"


def coverage(trials: list[Trial]) -> list[str]:
    """The summary lines: per A/A metric, intervals holding 1; the planted ratio's."""
    out = [f"A/A {metric}: {held([t.aa[metric] for t in trials], 1.0)}" for metric in AA_METRICS]
    planted = [t.planted for t in trials]
    for name, truth in (("planted gap + PLANTED_MS", planted_truth(trials)), ("pooled over the trials",
                                                                              pooled_ratio(trials))):
        out.append(f"planted {PLANTED_METRIC}, ratio {truth:.3f} ({name.replace('PLANTED_MS', f'{PLANTED_MS:g} ms')}):"
                   f" {held(planted, truth)}")
    above = sum(1 for i in planted if i is not None and i.lower > 1)
    out.append(f"planted {PLANTED_METRIC}: {above} of {len(trials)} intervals exclude 1 "
               f"({sum(i is None for i in planted)} without an interval)")
    return out


@dataclass
class PlantedTrial:
    """One trial of --planted recording: its intervals per (load point, metric), the client's overhead per arm."""

    seed: int
    found: dict[tuple[str, str], Interval | None]
    every_window: dict[tuple[str, str], Interval | None]  # the same over every window: no steady cut
    served: planted_recording.Served  # the client's overhead, the servers' draws
    gap_overhead_s: dict[str, float]  # at the open load point: mean inter-token latency less the planted gap
    not_steady: list[str]
    kept_out: dict[str, int]  # load point -> requests the steady part kept out, both arms


def run_planted(seed: int, work_dir: Path, reuse: bool = False) -> PlantedTrial:
    run_dir = work_dir / f"trial-{seed}"
    if not (reuse and (run_dir / "report.json").is_file()):
        planted_recording.run(seed, run_dir, work_dir)
    cost = json.loads((run_dir / "report.json").read_text())["cost"]
    found = {(phase, m): i for phase in planted_recording.PHASES
             for m, i in intervals(cost, "slow", phase).items() if m in _truths(phase)}
    gaps = {p["arm"]: [g for g in p["per_window"][PLANTED_METRIC] if g is not None]
            for p in cost["phases"] if p["phase"] == "load"}
    services = planted_recording.services(seed)
    every = {key: None if r.lower is None or r.upper is None or r.value is None
             else Interval(r.value, r.lower, r.upper, r.method)
             for key, r in planted_recording.every_window(run_dir).items()}
    return PlantedTrial(seed, found, every, planted_recording.served(run_dir, seed),
                        {a: sum(g) / len(g) - services[a].gap_s for a, g in gaps.items()}, not_steady(cost),
                        {phase: sum(p["steady"]["requests_kept_out"] for p in cost["phases"] if p["phase"] == phase)
                         for phase in planted_recording.PHASES})


def planted_coverage(trials: list[PlantedTrial]) -> list[str]:
    """Per load point and metric, the intervals holding the true ratio; then the client's overhead, and the ratio
    it makes of the truth (the server's) beside the intervals' width."""
    out = []
    for phase in planted_recording.PHASES:
        out += [f"planted recording, {phase} {metric}: {held([t.found[(phase, metric)] for t in trials], truth)}"
                for metric, truth in _truths(phase).items()]
    for phase in planted_recording.PHASES:
        out += [f"planted recording, {phase} {metric}, every window (no steady cut): "
                f"{held([t.every_window[(phase, metric)] for t in trials], truth)}"
                for metric, truth in _truths(phase).items()]
    for phase in planted_recording.PHASES:
        cut = sum(1 for t in trials if t.kept_out[phase])
        out.append(f"{phase}: the steady part kept requests out of either arm in {cut} of {len(trials)} trials")
    out.append("the servers' draws, slow/base, geometric mean over the trials: " + ", ".join(
        f"{phase} {math.exp(statistics.mean(math.log(t.served.drawn_ratio[phase]) for t in trials)):.3f}"
        for phase in planted_recording.PHASES))
    services = planted_recording.services(0)
    for name, what in (("time to first token", "ttft_median_s"), ("inter-token latency", "gap_s")):
        c = {a: statistics.mean((t.served.overhead_s if what == "ttft_median_s" else t.gap_overhead_s)[a]
                                for t in trials) for a in services}
        base = getattr(services["base"], what) * (math.exp(planted_recording.SPREAD ** 2 / 2)
                                                  if what == "ttft_median_s" else 1.0)
        widths = [i.upper / i.lower for t in trials if (i := t.found[("load", _METRIC[name])]) is not None]
        out.append(f"client overhead on {name}: base {c['base'] * 1e3:+.2f} ms, slow {c['slow'] * 1e3:+.2f} ms "
                   f"(mean over the trials); the ratio a client measures at the server's mean "
                   f"{base * 1e3:.1f} ms: {(2 * base + c['slow']) / (base + c['base']):.4f}; the load point's "
                   f"intervals, upper/lower: median {statistics.median(widths):.3f}")
    return out


def _truths(phase: str) -> dict[str, float]:
    return planted_recording.CLOSED_TRUTH if phase == "closed" else planted_recording.TRUTH


_METRIC = {"time to first token": "time_to_first_token_s", "inter-token latency": PLANTED_METRIC}


def _show(i: Interval | None) -> str:
    return "none" if i is None else f"{i.ratio:.3f} [{i.lower:.3f}, {i.upper:.3f}] {i.method.split(':')[0].split()[0]}"


def _planted_line(t: PlantedTrial) -> str:
    found = "; ".join(f"{phase} {metric} {_show(i)}" for (phase, metric), i in t.found.items())
    steady = f"; not steady: {', '.join(t.not_steady)}" if t.not_steady else ""
    overhead = ", ".join(f"{a} {v * 1e3:+.2f} ms" for a, v in t.served.overhead_s.items())
    drawn = ", ".join(f"{phase} {v:.3f}" for phase, v in t.served.drawn_ratio.items())
    cut = ", ".join(f"{phase} {n}" for phase, n in t.kept_out.items() if n)
    return (f"trial seed={t.seed}: {found}; client overhead on time to first token: {overhead}; the servers' "
            f"draws, slow/base: {drawn}{steady}"
            + (f"; kept out as not steady: {cut} requests" if cut else ""))


def _line(t: Trial) -> str:
    show = _show
    aa = "; ".join(f"{m} {show(t.aa[m])}" for m in AA_METRICS)
    steady = f"; not steady: {', '.join(t.not_steady)}" if t.not_steady else ""
    return f"trial seed={t.seed}: A/A {aa}; planted {PLANTED_METRIC} {show(t.planted)}{steady}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--work-dir", type=Path, default=None, help="the runs' folder (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="read the runs already in --work-dir again")
    parser.add_argument("--unmatched", action="store_true",
                        help="the A/A of two runs at two load.seeds instead: Welch against the block bootstrap")
    parser.add_argument("--planted", choices=["engine", "recording"], default="engine",
                        help="engine: the reference engine's A/A and step delay; recording: a known service time")
    args = parser.parse_args(argv)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="cost-calibration-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    print("$ .venv/bin/python bench/cost_calibration.py", *(argv if argv is not None else sys.argv[1:]))
    if args.unmatched:
        sys.path.insert(0, str(ROOT / "bench"))
        from cost_unmatched import unmatched_lines

        print(*unmatched_lines(work_dir, args.trials, _run, args.reuse), sep="\n")
        return 0
    if args.planted == "recording":
        planted = _each(args.trials, lambda seed: run_planted(seed, work_dir, reuse=args.reuse), _planted_line)
        print(*planted_coverage(planted), sep="\n")
        return 0
    trials = _each(args.trials, lambda seed: run_trial(seed, work_dir, reuse=args.reuse), _line)
    print(*coverage(trials), sep="\n")
    return 0


def _each(trials: int, run: Callable[[int], T], line: Callable[[T], str]) -> list[T]:
    """Every trial run in turn, its line printed as it ends."""
    done: list[T] = []
    for seed in range(trials):
        done.append(run(seed))
        print(line(done[-1]), flush=True)
    return done


if __name__ == "__main__":
    raise SystemExit(main())
