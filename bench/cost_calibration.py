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
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def run_trial(seed: int, work_dir: Path, extra: list[str] | None = None, reuse: bool = False) -> Trial:
    """One run of the calibration study at `seed`; its report's ratios (`reuse`: an earlier run's report there,
    read again)."""
    run_dir = work_dir / f"trial-{seed}"
    if not (reuse and (run_dir / "report.json").is_file()):
        _run(seed, run_dir, work_dir, extra or [])
    cost = json.loads((run_dir / "report.json").read_text())["cost"]
    ratios = {(r["arm_b"], r["metric"]): r for r in cost["ratios"] if r["phase"] == "load"}

    def interval(arm: str, metric: str) -> Interval | None:
        r = ratios[(arm, metric)]
        return None if r["lower_95"] is None else Interval(r["ratio"], r["lower_95"], r["upper_95"], r["method"])

    gaps = {p["arm"]: [g for g in p["per_window"][PLANTED_METRIC] if g is not None] for p in cost["phases"]}
    return Trial(seed, {m: interval("baseline_aa", m) for m in AA_METRICS}, interval("slow", PLANTED_METRIC),
                 gaps["baseline"], gaps["slow"], [p["arm"] for p in cost["phases"] if not p["steady"]["steady"]])


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


def coverage(trials: list[Trial]) -> list[str]:
    """The summary lines: per A/A metric, intervals holding 1; the planted ratio's."""
    out = []
    for metric in AA_METRICS:
        found = [t.aa[metric] for t in trials]
        held = sum(1 for i in found if i is not None and i.holds(1.0))
        out.append(f"A/A {metric}: {held} of {len(trials)} intervals hold 1 "
                   f"({sum(i is None for i in found)} without an interval)")
    planted = [t.planted for t in trials]
    for name, truth in (("planted gap + PLANTED_MS", planted_truth(trials)), ("pooled over the trials",
                                                                              pooled_ratio(trials))):
        held = sum(1 for i in planted if i is not None and i.holds(truth))
        out.append(f"planted {PLANTED_METRIC}, ratio {truth:.3f} ({name.replace('PLANTED_MS', f'{PLANTED_MS:g} ms')}):"
                   f" {held} of {len(trials)} intervals hold it")
    above = sum(1 for i in planted if i is not None and i.lower > 1)
    out.append(f"planted {PLANTED_METRIC}: {above} of {len(trials)} intervals exclude 1 "
               f"({sum(i is None for i in planted)} without an interval)")
    return out


def _line(t: Trial) -> str:
    def show(i: Interval | None) -> str:
        return "none" if i is None else f"{i.ratio:.3f} [{i.lower:.3f}, {i.upper:.3f}] {i.method.split(':')[0]}"

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
    args = parser.parse_args(argv)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="cost-calibration-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    print("$ .venv/bin/python bench/cost_calibration.py", *(argv if argv is not None else sys.argv[1:]))
    if args.unmatched:
        sys.path.insert(0, str(ROOT / "bench"))
        from cost_unmatched import unmatched_lines

        print(*unmatched_lines(work_dir, args.trials, _run, args.reuse), sep="\n")
        return 0
    trials = []
    for seed in range(args.trials):
        trials.append(run_trial(seed, work_dir, reuse=args.reuse))
        print(_line(trials[-1]), flush=True)
    print(*coverage(trials), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
