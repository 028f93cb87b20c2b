"""What the orchestrator adds to what the engine costs: the default study (2 reference-engine arms, the
smoke protocol) through `orchestrator run`, against a hand-written script doing the same work (docker run,
readiness poll, the same requests in the same order and grouping, the answers kept, docker rm -f), each in a
fresh interpreter, alternated, in one process. Prints each pair, the median ratio, and the orchestrator's own
stage timings (run.json `timings_s`, medians).

    .venv/bin/python bench/study_overhead.py --pairs 5

The baseline is what people write by hand today; it keeps the raw answers in memory and writes one JSON file.
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

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "orchestrator/reference-engine:0.1.0"

# The hand-written baseline, run as its own script: the default study's two arms, smoke protocol.
BASELINE = r'''
import asyncio, json, sys, time
import docker, httpx

ARMS = {"baseline": 16, "wide_batch": 32}  # --max-num-seqs of each arm
PROMPTS = ["The capital of France is", "Count from one to ten: one, two,"]
BODY = {"model": "reference", "max_tokens": 16, "temperature": 0.0, "logprobs": 20}

async def requests(url):
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        for prompt in PROMPTS:  # sequential: 6 per prompt
            for _ in range(6):
                out.append((await client.post("/v1/completions", json={**BODY, "prompt": prompt})).content)
        for prompt in PROMPTS:  # concurrent: 2 batches of 4 per prompt
            for _ in range(2):
                answers = await asyncio.gather(*(client.post("/v1/completions", json={**BODY, "prompt": prompt})
                                                 for _ in range(4)))
                out += [a.content for a in answers]
    return out

client = docker.from_env()
kept = {}
for arm, seqs in ARMS.items():
    flags = ["--served-model-name", "reference", "--seed", "0", "--max-num-seqs", str(seqs), "--max-model-len", "8192"]
    container = client.containers.run(sys.argv[1], flags, init=True, detach=True,
                                      ports={"8000/tcp": ("127.0.0.1", None)})
    try:
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"]
        url = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        kept[arm] = [a.decode("utf-8", "replace") for a in asyncio.run(requests(url))]
    finally:
        container.remove(force=True)
json.dump(kept, open(sys.argv[2], "w"))
'''


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    ratios, ours, theirs, stages = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        script = Path(tmp) / "baseline.py"
        script.write_text(BASELINE)
        for pair in range(args.pairs):
            run_dir = Path(tmp) / f"run-{pair}"
            first_ours = pair % 2 == 0  # alternate which goes first: drift on a shared machine cancels
            runs = [("ours", [sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={run_dir}"]),
                    ("baseline", [sys.executable, str(script), IMAGE, str(Path(tmp) / f"answers-{pair}.json")])]
            seconds = dict((name, timed(argv)) for name, argv in (runs if first_ours else runs[::-1]))
            ours.append(seconds["ours"])
            theirs.append(seconds["baseline"])
            ratios.append(seconds["ours"] / seconds["baseline"])
            stages.append(json.loads((run_dir / "run.json").read_text())["timings_s"])
            print(f"pair {pair + 1}: orchestrator {seconds['ours']:.2f} s, hand-written {seconds['baseline']:.2f} s, "
                  f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"median: orchestrator {statistics.median(ours):.2f} s, hand-written {statistics.median(theirs):.2f} s, "
          f"ratio {statistics.median(ratios):.3f} ({args.pairs} pairs)")
    names = list(dict.fromkeys(name for s in stages for name in s))
    print("orchestrator stages (median s): " + ", ".join(
        f"{name} {statistics.median(s.get(name, 0.0) for s in stages):.2f}" for name in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
