"""Hidden-mechanism trials of `orchestrator triage` (issue 49): the reference engine as a process with one
mechanism switched on at random (or none), triaged without being told which; a trial passes when the first
finding names the mechanism (none: the verdict is "repeatable in everything tried"). Prints a table, a row per
trial, and the tally per mechanism.

    PYTHONPATH=. .venv/bin/python bench/triage_trials.py --trials 10 --seed 1 --out /tmp/triage-trials
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# mechanism -> (the switch triage should name, the overrides that turn it on)
MECHANISMS: dict[str, tuple[str, list[str]]] = {
    "batch_shape": ("batch_invariant", ["+arms.baseline.env.VLLM_BATCH_INVARIANT='0'"]),
    "topk_ties": ("topk_tiebreak", ["+arms.baseline.engine_args.topk-tiebreak=random"]),
    "fused_finalize": ("fused_finalize", ["+arms.baseline.engine_args.fused-finalize=true"]),
    "prefix_cache": ("prefix_cache", ["+arms.baseline.engine_args.enable-prefix-caching=true"]),
    "stale_step": ("cuda_graphs", ["+arms.baseline.engine_args.cuda-graphs=true"]),
    "none": ("", []),
}
BASE = ["runtime=process", "arm@arms.baseline=reference_process"]


def trial(mechanism: str, out: Path, budget: int) -> tuple[str, bool, float, int]:
    """One triage; (its verdict, passed, seconds, requests spent)."""
    expected, overrides = MECHANISMS[mechanism]
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "orchestrator", "triage", *BASE, *overrides, "--out", str(out),
                    "--budget-requests", str(budget)], cwd=ROOT, check=False, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    found = json.loads((out / "findings.json").read_text(encoding="utf-8")) if (out / "findings.json").is_file() else {}
    verdict = str(found.get("verdict", "no findings page"))
    first = (found.get("findings") or [{}])[0]
    passed = (first.get("cause") == expected) if expected else verdict.startswith("repeatable in everything tried")
    spent = sum(int(s.get("requests") or 0) for s in found.get("steps") or [])
    return verdict, passed, seconds, spent


def main() -> int:
    made = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    made.add_argument("--trials", type=int, default=10)
    made.add_argument("--seed", type=int, default=1)
    made.add_argument("--budget-requests", type=int, default=400)
    made.add_argument("--mechanisms", default=",".join(MECHANISMS), help="comma-separated, from: "
                      + ", ".join(MECHANISMS))
    made.add_argument("--out", type=Path, required=True)
    args = made.parse_args()
    pool = args.mechanisms.split(",")
    draw = random.Random(args.seed)
    print("| trial | mechanism | passed | requests | seconds | verdict |")
    print("| ---: | --- | --- | ---: | ---: | --- |")
    tally: dict[str, list[bool]] = {}
    for i in range(args.trials):
        mechanism = draw.choice(pool)
        out = args.out / f"trial-{i:02d}-{mechanism}"
        verdict, passed, seconds, spent = trial(mechanism, out, args.budget_requests)
        tally.setdefault(mechanism, []).append(passed)
        print(f"| {i} | {mechanism} | {'yes' if passed else 'NO'} | {spent} | {seconds:.0f} | {verdict} |", flush=True)
    print()
    print("| mechanism | passed |")
    print("| --- | ---: |")
    for mechanism, results in sorted(tally.items()):
        print(f"| {mechanism} | {sum(results)} of {len(results)} |")
    total = [r for results in tally.values() for r in results]
    print(f"| all | {sum(total)} of {len(total)} |")
    return 0 if all(total) else 1


if __name__ == "__main__":
    raise SystemExit(main())
