"""The onset finder against a grid of the same resolution, in the same run (docs/benchmarks.md): the reference
engine's random top-k tie-break with the indexer budget at BUDGET, exact prompt lengths LOW..HIGH. The grid
runs one job every WIDTH tokens (Hydra's basic sweeper); the finder stops at an interval WIDTH wide. Both use
one arm and the probe protocol (6 requests a job). Prints both answers and the ratio of requests (goal: at
most 1/4 with the same answer).

    .venv/bin/python bench/onset_vs_grid.py [--budget 256] [--low 64] [--high 512] [--width 16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]


def run(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([*ORCHESTRATOR, "run", *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--low", type=int, default=64)
    p.add_argument("--high", type=int, default=512)
    p.add_argument("--width", type=int, default=16)
    ns = p.parse_args()
    common = ["study=onset_indexer_budget", f"arms.random_topk.engine_args.indexer-budget={ns.budget}"]
    out = Path(tempfile.mkdtemp(prefix="onset-bench-"))
    finder_s = run([*common, f"hydra.sweeper.axis.low={ns.low}", f"hydra.sweeper.axis.high={ns.high}",
                    f"hydra.sweeper.width={ns.width}", f"hydra.sweeper.budget_tokens={ns.budget}",
                    f"hydra.sweep.dir={out / 'finder'}"])
    [config] = json.loads((out / "finder" / "onset.json").read_text())["configurations"]
    finder_requests = sum(j["requests"] for j in config["jobs"])
    values = list(range(ns.low, ns.high + 1, ns.width))
    # the same arm and prompt through Hydra's basic sweeper (study=sweep: one arm, no onset settings)
    grid_s = run(["-m", "study=sweep", "prompts=onset_length", "+arms.arm.engine_args.topk-tiebreak=random",
                  f"+arms.arm.engine_args.indexer-budget={ns.budget}",
                  f"prompts.prompts.p.length_tokens={','.join(map(str, values))}", f"hydra.sweep.dir={out / 'grid'}"])
    rows = []
    for job in sorted((out / "grid").iterdir()):
        if (job / "report.json").is_file():
            report = json.loads((job / "report.json").read_text())
            length = int(next(o.split("=")[1] for o in (job / ".hydra" / "overrides.yaml").read_text().split()
                              if "length_tokens=" in o))
            cells = report["cells"]
            requests = sum(c["n"] + c["errors"] for c in cells) + len(report.get("cold") or [])
            rows.append((length, sum(c["divergent"] or 0 for c in cells), requests))
    rows.sort()
    grid_requests = sum(r for _, _, r in rows)
    last_quiet = max((v for v, k, _ in rows if k == 0 and all(kk == 0 for vv, kk, _ in rows if vv <= v)), default=None)
    first_loud = min((v for v, k, _ in rows if k > 0), default=None)
    print(f"finder: {config['result']['line']} | {len(config['jobs'])} jobs, {finder_requests} requests, "
          f"{finder_s:.0f} s")
    print(f"grid:   onset in [{last_quiet}, {first_loud}] | {len(rows)} jobs, {grid_requests} requests, {grid_s:.0f} s")
    print(f"finder/grid requests: {finder_requests / grid_requests:.3f} (goal <= 0.25); dirs under {out}")


if __name__ == "__main__":
    main()
