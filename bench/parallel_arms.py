"""study.parallel_arms: a 4-arm study's wall time with its arms side by side against the same study one arm after
the other, alternated, each `orchestrator run` in a fresh interpreter; and whether the verdicts are the same
(exit status, and per cell the set of signatures the arms gave).

    .venv/bin/python bench/parallel_arms.py --pairs 3                       # this machine's engine
    .venv/bin/python bench/parallel_arms.py --pairs 3 --cpus 1              # one core each (cpuset)
    .venv/bin/python bench/parallel_arms.py --pairs 3 --cpus 1 --host ssh://orch-ci-remote:2222
                                       # over two engines (scripts/ci-hosts.sh; run with HOME=its client dir)
    python3 bench/parallel_arms.py --pairs 3 --cpus 4 --runtime process     # local processes (a box with no Docker)

The study: the default study's two reference-engine arms and two more equal to the baseline, smoke protocol.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("baseline", "wide_batch", "third", "fourth")
VARIABLES = ["+study.variables.third=[]", "+study.variables.fourth=[]"]


def four_arms(runtime: str) -> list[str]:
    """The four arms' overrides: the reference engine in Docker, or as a local process (runtime=process)."""
    if runtime == "process":
        return ["runtime=process", "arm@arms.baseline=reference_process", "arm@arms.wide_batch=reference_process",
                "+arm@arms.third=reference_process", "+arm@arms.fourth=reference_process", *VARIABLES]
    return ["+arm@arms.third=reference", "+arm@arms.fourth=reference", *VARIABLES]


def run(out: Path, overrides: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={out}", "protocol=smoke",
                           *overrides], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 3):
        sys.exit(f"run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.returncode


def verdicts(out: Path) -> dict[str, list[str]]:
    """Per cell (arm/prompt/phase) the sorted distinct signatures of its measured requests."""
    cells: dict[str, set[str]] = {}
    for row in pq.read_table(out / "data" / "responses").to_pylist():
        if row["role"] == "measured":
            cells.setdefault(f"{row['arm']}/{row['prompt_id']}/{row['phase']}", set()).add(row["sig_top_logprobs"])
    return {cell: sorted(sigs) for cell, sigs in sorted(cells.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=0, help="cores per arm (a cpuset each); 0: unpinned")
    parser.add_argument("--host", help="a second Docker host: arms are placed over local and it")
    parser.add_argument("--runtime", choices=["docker", "process"], default="docker")
    args = parser.parse_args()
    pinned = [*four_arms(args.runtime), *([f"arms.{arm}.cpus={args.cpus}" for arm in ARMS] if args.cpus else [])]
    hosts = [f"runtime.hosts=[local,{args.host}]"] if args.host else []
    ratios, same = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            apart_dir, together_dir = Path(tmp, f"apart-{pair}"), Path(tmp, f"together-{pair}")
            apart, apart_status = run(apart_dir, [*pinned, *hosts] if args.host else pinned)
            together, together_status = run(together_dir, ["study.parallel_arms=auto", *pinned, *hosts])
            agree = apart_status == together_status and verdicts(apart_dir) == verdicts(together_dir)
            same &= agree
            waves = {row["wave"] for row in pq.read_table(together_dir / "data" / "arms").to_pylist()}
            ratios.append(together / apart)
            print(json.dumps({"pair": pair, "sequential_s": round(apart, 2), "parallel_s": round(together, 2),
                              "ratio": round(together / apart, 3), "waves": len(waves),
                              "same_verdicts": agree}), flush=True)
    print(json.dumps({"median_ratio": round(statistics.median(ratios), 3), "same_verdicts": same,
                      "cpus_per_arm": args.cpus or None, "runtime": args.runtime,
                      "hosts": ["local", args.host] if args.host else ["local"]}))


if __name__ == "__main__":
    main()
