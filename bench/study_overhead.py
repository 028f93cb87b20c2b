"""What the orchestrator adds to what the engine costs: the default study (2 reference-engine arms, the
smoke protocol) through `orchestrator run`, against a hand-written script doing the same work (docker run,
readiness poll, the same requests in the same order and grouping, the answers kept, docker rm -f), each in a
fresh interpreter, alternated, in one process. Prints each pair, the median ratio, the orchestrator's own
stage timings (run.json `timings_s`, medians), the CPU each process used (its engine's not counted: a steadier
figure than wall time on a shared machine) and the load average before and after.

    .venv/bin/python bench/study_overhead.py --pairs 5
    .venv/bin/python bench/study_overhead.py --pairs 5 --arms 6   # what each further arm adds

The baseline is what people write by hand today; it keeps the raw answers in memory and writes one JSON file.

    .venv/bin/python bench/study_overhead.py --overlap --pairs 5

measures `runtime.overlap_arm_starts` instead: a 4-arm study (the default study's two arms and two more that
differ in --max-num-seqs) run one arm after the other and overlapped, alternated, in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

ARMS = json.loads(sys.argv[3])  # arm -> its --max-num-seqs; 29 requests each, as the protocol sends
PROMPTS = ["The capital of France is", "Count from one to ten: one, two,"]
BODY = {"model": "reference", "max_tokens": 16, "temperature": 0.0, "logprobs": 20}

async def requests(url):
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        # the cold request: the first prompt once, alone, before the phases (the protocol's first request)
        out.append((await client.post("/v1/completions", json={**BODY, "prompt": PROMPTS[0]})).content)
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
kept, timings = {}, {"start_to_ready": 0.0, "requests": 0.0, "stop": 0.0}
edges_ns = {"first_start": 0, "last_stopped": 0}  # wall clock, beside the orchestrator's start_ns and stop_ns
for arm, seqs in ARMS.items():
    started = time.perf_counter()
    edges_ns["first_start"] = edges_ns["first_start"] or time.time_ns()
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
        ready = time.perf_counter()
        timings["start_to_ready"] += ready - started
        kept[arm] = [a.decode("utf-8", "replace") for a in asyncio.run(requests(url))]
        timings["requests"] += time.perf_counter() - ready
    finally:
        stopping = time.perf_counter()
        container.remove(force=True)
        timings["stop"] += time.perf_counter() - stopping
        edges_ns["last_stopped"] = time.time_ns()
json.dump({"answers": kept, "timings_s": timings, "edges_ns": edges_ns}, open(sys.argv[2], "w"))
'''


def timed(argv: list[str], cpu_s: list[float] | None = None, ends_ns: list[tuple[int, int]] | None = None
          ) -> float:
    """Wall seconds of the command; its CPU seconds (user + system) appended to `cpu_s`, its launch and exit
    (wall clock, ns) to `ends_ns`."""
    start, used, launched_ns = time.perf_counter(), _children_cpu_s(), time.time_ns()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-2000:]}")
    if cpu_s is not None:
        cpu_s.append(_children_cpu_s() - used)
    if ends_ns is not None:
        ends_ns.append((launched_ns, time.time_ns()))
    return time.perf_counter() - start


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def extra_arms(arms: int) -> tuple[dict[str, int], list[str]]:
    """The default study's two arms and more, each differing from the baseline in --max-num-seqs only: every
    arm's --max-num-seqs, and the overrides that add the arms beyond the default two."""
    seqs = {"baseline": 16, "wide_batch": 32} | {f"w{16 * k}": 16 * k for k in range(3, arms + 1)}
    overrides = [f"{prefix}{key}" for name, n in list(seqs.items())[2:] for prefix, key in (
        ("+arm@arms.", f"{name}=reference"), ("arms.", f"{name}.engine_args.max-num-seqs={n}"),
        ("+study.variables.", f"{name}=[engine_args.max-num-seqs]"))]
    return seqs, overrides


def overlap(pairs: int) -> None:
    """The 4-arm study one arm after the other, then overlapped (alternating which goes first)."""
    walls: dict[str, list[float]] = {"serial": [], "overlapped": []}
    with tempfile.TemporaryDirectory(prefix="overlap-") as tmp:
        for pair in range(pairs):
            runs = [(mode, [sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={tmp}/{mode}-{pair}",
                            *extra_arms(4)[1], f"runtime.overlap_arm_starts={mode == 'overlapped'}"])
                    for mode in ("serial", "overlapped")]
            for mode, argv in runs if pair % 2 == 0 else runs[::-1]:
                walls[mode].append(timed(argv))
            print(f"pair {pair + 1}: serial {walls['serial'][-1]:.2f} s, overlapped {walls['overlapped'][-1]:.2f} s",
                  flush=True)
    serial, overlapped = statistics.median(walls["serial"]), statistics.median(walls["overlapped"])
    print(f"median ({pairs} pairs, 4 arms): serial {serial:.2f} s, overlapped {overlapped:.2f} s, "
          f"ratio {overlapped / serial:.3f}, saved {(serial - overlapped) / 3:.2f} s per arm after the first")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--arms", type=int, default=2, help="arms in the study (beyond 2: more --max-num-seqs)")
    parser.add_argument("--overlap", action="store_true", help="measure runtime.overlap_arm_starts instead")
    args = parser.parse_args()
    if args.overlap:
        overlap(args.pairs)
        return 0
    # The package as pip installs one: compiled (an editable install is not, and PYTHONDONTWRITEBYTECODE, where
    # set, would make every run compile it again); the baseline's libraries are.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "orchestrator")], check=True,
                   capture_output=True)
    seqs, more = extra_arms(args.arms)
    print(f"load average at the start: {_load()}", flush=True)  # the machine may be shared: say how busy it was
    ratios, ours, theirs, stages, by_hand = [], [], [], [], []
    # CPU seconds of each process (not its engine's): on a shared machine they move far less than wall time
    cpu: dict[str, list[float]] = {"ours": [], "baseline": []}
    # Launch to the first container asked for, and the last arm stopped to exit: what each adds around the arms
    ends: dict[str, list[tuple[int, int]]] = {"ours": [], "baseline": []}
    edges: dict[str, list[tuple[float, float]]] = {"ours": [], "baseline": []}
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        script = Path(tmp) / "baseline.py"
        script.write_text(BASELINE)
        for pair in range(args.pairs):
            run_dir = Path(tmp) / f"run-{pair}"
            first_ours = pair % 2 == 0  # alternate which goes first: drift on a shared machine cancels
            runs = [("ours", [sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={run_dir}", *more]),
                    ("baseline", [sys.executable, str(script), IMAGE, str(Path(tmp) / f"answers-{pair}.json"),
                                  json.dumps(seqs)])]
            seconds = {name: timed(argv, cpu[name], ends[name]) for name, argv in (runs if first_ours else runs[::-1])}
            ours.append(seconds["ours"])
            theirs.append(seconds["baseline"])
            ratios.append(seconds["ours"] / seconds["baseline"])
            stages.append(json.loads((run_dir / "run.json").read_text())["timings_s"])
            answers = json.loads((Path(tmp) / f"answers-{pair}.json").read_text())
            by_hand.append(answers["timings_s"])
            edges["ours"].append(_edges_s(ends["ours"][-1], *_arm_edges_ns(run_dir)))
            edges["baseline"].append(_edges_s(ends["baseline"][-1], answers["edges_ns"]["first_start"],
                                              answers["edges_ns"]["last_stopped"]))
            print(f"pair {pair + 1}: orchestrator {seconds['ours']:.2f} s, hand-written {seconds['baseline']:.2f} s, "
                  f"ratio {ratios[-1]:.3f}; CPU {cpu['ours'][-1]:.2f} s against {cpu['baseline'][-1]:.2f} s",
                  flush=True)
    print(f"median: orchestrator {statistics.median(ours):.2f} s, hand-written {statistics.median(theirs):.2f} s, "
          f"ratio {statistics.median(ratios):.3f} ({args.pairs} pairs, {args.arms} arms)")
    beyond = statistics.median(o - t for o, t in zip(ours, theirs, strict=True))
    print(f"CPU of the process (median): orchestrator {statistics.median(cpu['ours']):.2f} s, hand-written "
          f"{statistics.median(cpu['baseline']):.2f} s")
    print(f"beyond the hand-written script (median of the pairs): {beyond:.2f} s, {beyond / args.arms:.2f} s per arm")
    # The requests stage differs in kind: the script's httpx pool queues a "concurrent" batch on few connections
    # (encode/httpcore#822), the orchestrator releases it on one connection per request. Outside it, both do the
    # same work: start, readiness, stop, and whatever else each adds.
    outside = statistics.median((o - s["requests"]) - (t - h["requests"])
                                for o, t, s, h in zip(ours, theirs, stages, by_hand, strict=True))
    print(f"beyond it outside the requests stage: {outside:.2f} s, {outside / args.arms:.2f} s per arm")
    names = list(dict.fromkeys(name for s in stages for name in s))
    print("orchestrator stages (median s): " + ", ".join(
        f"{name} {statistics.median(s.get(name, 0.0) for s in stages):.2f}" for name in names))
    print("hand-written stages (median s): " + ", ".join(
        f"{name} {statistics.median(s[name] for s in by_hand):.2f}" for name in by_hand[0]))
    print("launch to the first container, last arm stopped to exit (median s): " + ", ".join(
        f"{name} {statistics.median(first for first, _ in edges[key]):.3f} and "
        f"{statistics.median(last for _, last in edges[key]):.3f}"
        for name, key in (("orchestrator", "ours"), ("hand-written", "baseline"))))
    print(f"load average at the end: {_load()}")
    return 0


def _arm_edges_ns(run_dir: Path) -> tuple[int, int]:
    """When the run's first arm was asked to start, and when its last arm was stopped (its `arms` rows)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(run_dir / "data" / "arms", columns=["start_ns", "stop_ns"]).to_pylist()
    return min(row["start_ns"] for row in rows), max(row["stop_ns"] for row in rows)


def _edges_s(ends_ns: tuple[int, int], first_start_ns: int, last_stopped_ns: int) -> tuple[float, float]:
    launched_ns, exited_ns = ends_ns
    return (first_start_ns - launched_ns) / 1e9, (exited_ns - last_stopped_ns) / 1e9


def _load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
