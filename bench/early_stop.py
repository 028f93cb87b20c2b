"""What `protocol.stop_after_divergences` saves: the fused-finalize study on the reference engine (the unfused
arm repeats itself, the fused one varies call to call, so half its cells diverge at once), run with a fixed n
and with stop_after_divergences: 1, alternated, through `orchestrator run` in a fresh interpreter each. Prints
the requests each sent, their ratio (goal <= 0.6x) and whether every cell's verdict (diverged or not) is the
same in both.

    .venv/bin/python bench/early_stop.py --repeats 30 --pairs 1
    .venv/bin/python bench/early_stop.py --runtime process   # the reference engine as local processes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    requests: int
    measured: int
    wall_s: float
    verdicts: dict[str, bool]  # cell -> diverged (more than one signature)
    bounds: dict[str, tuple[float | None, float | None]]
    headline: list[str]


def _pct(value: float | None) -> str:
    return "none" if value is None else f"{100 * value:.1f}%"


def run(out: Path, repeats: int, stop: int | None, process: bool) -> Outcome:
    """One study run; its requests sent, wall time and per-cell verdicts."""
    overrides = ["study=fused_finalize", f"protocol.phases.sequential.repeats={repeats}",
                 f"hydra.run.dir={out}"]
    if process:
        overrides += ["runtime=process", "arm@arms.unfused=reference_process", "arm@arms.fused=reference_process",
                      "+arms.fused.engine_args.fused-finalize=true"]
    if stop is not None:
        overrides.append(f"protocol.stop_after_divergences={stop}")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", *overrides], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode not in (0, 3):
        raise SystemExit(f"orchestrator run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import read_table

    roles = read_table(RunPaths(out), "responses", ["role"]).column("role").to_pylist()
    verdicts = {f"{c['arm']}/{c['prompt_id']}/{c['phase']}": (c["distinct_signatures"] or 0) > 1
                for c in report["cells"]}
    bounds = {f"{c['arm']}/{c['prompt_id']}/{c['phase']}": (c["lower_bound_95"], c["upper_bound_95"])
              for c in report["cells"]}
    return Outcome(len(roles), roles.count("measured"), wall_s, verdicts, bounds, report["headline"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30, help="sequential requests per cell (fixed n)")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--runtime", choices=["docker", "process"], default="docker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="early-stop-") as tmp:
        for pair in range(args.pairs):
            fixed = run(Path(tmp) / f"fixed-{pair}", args.repeats, None, args.runtime == "process")
            stopped = run(Path(tmp) / f"stop-{pair}", args.repeats, 1, args.runtime == "process")
            same = fixed.verdicts == stopped.verdicts
            print(f"pair {pair}: fixed n={args.repeats}: {fixed.requests} requests ({fixed.measured} measured, "
                  f"{fixed.wall_s:.1f} s); stop_after_divergences=1: {stopped.requests} requests "
                  f"({stopped.measured} measured, {stopped.wall_s:.1f} s); ratio "
                  f"{stopped.requests / fixed.requests:.2f}x requests, {stopped.measured / fixed.measured:.2f}x "
                  f"measured; verdict per cell {'the same' if same else 'DIFFERENT'}")
            for cell, diverged in fixed.verdicts.items():
                low, high = stopped.bounds[cell]
                print(f"  {cell}: {'diverged' if diverged else 'one signature'}; the stopped run's 95% bounds "
                      f"{_pct(low)} to {_pct(high)}")
            print("  " + next((h for h in stopped.headline if h.startswith("Sample size")), ""))

if __name__ == "__main__":
    main()
