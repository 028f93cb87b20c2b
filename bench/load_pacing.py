"""The load generator's pacing (run/load/generator.py) against AIPerf's, at the same rates and request counts,
on the same recording server (bench/recording_server.py, its own process). Issue 37's goals: the achieved rate
within 1 % of the target, p99 send lateness no worse than AIPerf's at 50, 200 and 1000 requests/s, the same
request count.

    .venv/bin/python bench/load_pacing.py                              # constant 50, 200, 1000/s
    .venv/bin/python bench/load_pacing.py --arrivals constant,poisson --repeats 2
    .venv/bin/python bench/load_pacing.py --arrivals poisson --repeats 2 --without-aiperf   # ours alone

AIPerf runs from its own venv (`python3 -m venv ~/.cache/orchestrator/aiperf-venv && .../bin/pip install
aiperf`), with the tokenizer of a local folder (no download). Each tool runs in its own interpreter; the tools
alternate within a rate. Requests: POST /v1/completions, unstreamed, no concurrency ceiling.

Measures, the same for both tools, from the server's arrivals (`done_ns`: the whole request read):
- count: completion requests that arrived;
- achieved rate: (count - 1) / (last arrival - first arrival), the rate of the gaps (n requests at rate r span
  (n - 1) / r);
- lateness (server): the i-th arrival minus the i-th scheduled time, aligned so that the least-late request is
  on time (lateness_i = d_i - min_j d_j, d_i = arrival_i - schedule_i): constant arrivals, schedule_i = i / rate;
  Poisson, each tool's own drawn schedule: ours its scheduled_ns, AIPerf's redrawn from its seed
  (`--random-seed 0`) with its own random generator in its venv, the same expovariate draws its pacer makes;
- with Poisson arrivals the rate's error is against the drawn schedule's own rate (500 draws miss the nominal
  rate by several %).
And each tool's own record: ours send_ns - scheduled_ns; AIPerf's request_start_ns aligned against its
schedule as the server's arrivals are (it exports no scheduled time; credit_issued_ns is when its pacer let the
request go, which is late itself when the pacer lags).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AIPERF = Path.home() / ".cache/orchestrator/aiperf-venv/bin/aiperf"
TOKENIZER = Path.home() / ".cache/orchestrator/models/tiny-llama"
MODEL = "recording"
PROMPT = "The capital of France is"
AIPERF_SEED = 0  # --random-seed: its Poisson draws are redrawn from it


@dataclasses.dataclass(frozen=True)
class Run:
    """One tool's run at one rate: the server's arrivals, and the tool's own send times and schedule."""

    tool: str  # "ours" | "aiperf"
    arrivals: str  # "constant" | "poisson"
    rate_per_s: float
    requested: int
    server_ns: list[int]  # the completion requests' arrivals, sorted
    send_ns: list[int]  # the tool's own record, in schedule order
    schedule_ns: list[float]  # when each was meant to leave, in order: ours wall-clock; AIPerf's from its start
    connections: int = 0  # opened to the server
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Measures:
    count: int
    achieved_per_s: float
    error_pct: float
    server_p50_ms: float
    server_p99_ms: float
    own_p50_ms: float
    own_p99_ms: float


def achieved_rate(arrivals_ns: list[int]) -> float:
    """(count - 1) / span: the rate of the gaps."""
    span_ns = arrivals_ns[-1] - arrivals_ns[0] if len(arrivals_ns) > 1 else 0
    return (len(arrivals_ns) - 1) / (span_ns / 1e9) if span_ns > 0 else math.nan


def lateness_ms(times_ns: list[int], schedule_ns: list[float]) -> list[float]:
    """Each time minus its schedule, shifted so the least late is 0 (the schedule's start is the tool's)."""
    deltas = [t - s for t, s in zip(times_ns, schedule_ns, strict=True)]
    least = min(deltas)
    return [(d - least) / 1e6 for d in deltas]


def percentile(values: list[float], q: float) -> float:
    """Nearest rank (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def constant_schedule(count: int, rate_per_s: float) -> list[float]:
    return [i * 1e9 / rate_per_s for i in range(count)]


def measure(run: Run) -> Measures:
    n = len(run.server_ns)
    schedule = run.schedule_ns[:n]
    server = lateness_ms(run.server_ns, schedule) if n == len(schedule) else []
    if run.tool == "aiperf":  # no scheduled time of its own: its sends aligned as the arrivals are
        own = lateness_ms(sorted(run.send_ns), run.schedule_ns[:len(run.send_ns)])
    else:
        own = [(s - c) / 1e6 for s, c in zip(run.send_ns, run.schedule_ns, strict=True)]
    achieved = achieved_rate(run.server_ns)
    target = run.rate_per_s if run.arrivals == "constant" else achieved_rate([round(t) for t in schedule])
    return Measures(n, achieved, 100 * (achieved - target) / target, percentile(server, 50),
                    percentile(server, 99), percentile(own, 50), percentile(own, 99))


# --- the recording server -------------------------------------------------------------------------------------

class Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(ROOT / "bench/recording_server.py"), "--port", "0"],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().split()[-1]

    def _call(self, method: str, path: str) -> bytes:
        request = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return bytes(answer.read())

    def reset(self) -> None:
        self._call("POST", "/_reset")

    def completions(self) -> list[int]:
        rows = json.loads(self._call("GET", "/_recorded"))
        return sorted(row[3] for row in rows if row[0] == "POST" and row[1] == "/v1/completions")

    def connections(self) -> int:
        """Connections that brought any request since the last reset (warm-ups and probes too)."""
        return len({row[4] for row in json.loads(self._call("GET", "/_recorded"))})

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# --- the tools ------------------------------------------------------------------------------------------------

def run_ours(server: Server, arrivals: str, rate_per_s: float, count: int, gc_off: bool = False) -> Run:
    """The load generator in a fresh interpreter (this script's --child mode)."""
    tool = "ours-gc-off" if gc_off else "ours"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "timed.json"
        argv = [sys.executable, __file__, "--child", server.url, arrivals, str(rate_per_s), str(count), str(out),
                "gc-off" if gc_off else "gc-on"]
        done = subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True)
        if done.returncode != 0:
            return Run(tool, arrivals, rate_per_s, count, server.completions(), [], [], server.connections(),
                       f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        timed = json.loads(out.read_text())
    return Run(tool, arrivals, rate_per_s, count, server.completions(), timed["send_ns"],
               [float(t) for t in timed["scheduled_ns"]], server.connections())


async def _child(url: str, arrivals: str, rate_per_s: float, count: int, out: Path, gc_off: bool) -> None:
    from orchestrator.config.schema import Arrivals
    from orchestrator.run.load.generator import Prepared, run_window
    from orchestrator.run.load.schedule import Pace, offsets_s

    offsets = offsets_s(Pace(rate_per_s, None, count, None), Arrivals(arrivals), 1.0, seed=0)
    assert offsets is not None
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2, "temperature": 0.0}
    if gc_off:  # as AIPerf's services run: what is alive now is never scanned again, and nothing is collected
        gc.collect()
        gc.freeze()
        gc.disable()
    result = await run_window(url, [Prepared("/v1/completions", body, offset) for offset in offsets], grace_s=30)
    bad = [t.error for t in result.timed if t.error]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed, the first: {bad[0]}")
    out.write_text(json.dumps({"send_ns": [t.send_ns for t in result.timed],
                               "scheduled_ns": [t.scheduled_ns for t in result.timed]}))


def run_aiperf(server: Server, arrivals: str, rate_per_s: float, count: int, aiperf: Path) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(aiperf), "profile", "--model", MODEL, "--url", server.url, "--endpoint-type", "completions",
                "--tokenizer", str(TOKENIZER), "--request-rate", f"{rate_per_s:g}", "--arrival-pattern", arrivals,
                "--request-count", str(count), "--random-seed", str(AIPERF_SEED), "--isl", "8", "--osl", "2",
                "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry", "--artifact-dir", tmp]
        done = subprocess.run(argv, capture_output=True, text=True)
        records = Path(tmp) / "profile_export.jsonl"
        if done.returncode != 0 or not records.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            return Run("aiperf", arrivals, rate_per_s, count, server.completions(), [], [], server.connections(),
                       f"exit {done.returncode}: {tail}")
        metas = [json.loads(line)["metadata"] for line in records.read_text().splitlines() if line.strip()]
    sends = sorted(m["request_start_ns"] for m in metas if m.get("benchmark_phase") == "profiling")
    schedule = (constant_schedule(count, rate_per_s) if arrivals == "constant"
                else aiperf_poisson_schedule(aiperf, rate_per_s, count))
    return Run("aiperf", arrivals, rate_per_s, count, server.completions(), sends, schedule, server.connections())


def aiperf_poisson_schedule(aiperf: Path, rate_per_s: float, count: int) -> list[float]:
    """AIPerf's Poisson send times (ns from its start), redrawn as its pacer draws them (timing/strategies/
    request_rate.py: the first at one interval, then one interval more each) from its seeded generator."""
    draw = ("import json, sys; from aiperf.common import random_generator as rng; rng.init(int(sys.argv[1])); "
            "g = rng.derive('timing.request.poisson_interval'); "
            "print(json.dumps([g.expovariate(float(sys.argv[2])) for _ in range(int(sys.argv[3]))]))")
    done = subprocess.run([str(aiperf.parent / "python"), "-c", draw, str(AIPERF_SEED), str(rate_per_s), str(count)],
                          capture_output=True, text=True, check=True)
    out, now = [], 0.0
    for gap_s in json.loads(done.stdout):
        now += gap_s * 1e9
        out.append(now)
    return out


# --- the table ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Round:
    """Every tool once at one rate, alternated: tool -> its run and measures (None: it failed)."""

    runs: dict[str, tuple[Run, Measures | None]]

    def ratio(self, tool: str) -> float | None:
        """The tool's server p99 lateness over AIPerf's (None: AIPerf did not run)."""
        mine, theirs = self.runs[tool][1], self.runs.get("aiperf", (None, None))[1]
        return mine.server_p99_ms / theirs.server_p99_ms if mine and theirs and theirs.server_p99_ms else None


def row(run: Run, m: Measures | None, ratio: float | None) -> str:
    if m is None:
        return f"| {run.arrivals} | {run.rate_per_s:g} | {run.tool} | failed: {run.error} |"
    ratio_text = "" if ratio is None else f"{ratio:.2f}"
    return (f"| {run.arrivals} | {run.rate_per_s:g} | {run.tool} | {m.count}/{run.requested} | "
            f"{m.achieved_per_s:.2f} | {m.error_pct:+.2f} | {m.server_p50_ms:.3f} | {m.server_p99_ms:.3f} | "
            f"{m.own_p50_ms:.3f} | {m.own_p99_ms:.3f} | {run.connections} | {ratio_text} |")


HEADER = ("| arrivals | target /s | tool | count | achieved /s | error % | server p50 ms | server p99 ms | "
          "own p50 ms | own p99 ms | connections | p99 / AIPerf's |\n|" + " --- |" * 12)


def rows(round_: Round) -> str:
    return "\n".join(row(run, m, None if tool == "aiperf" else round_.ratio(tool))
                     for tool, (run, m) in round_.runs.items())


def verdict(round_: Round, tool: str) -> str:
    (ours, mo) = round_.runs[tool]
    where = f"{tool}, {ours.arrivals} {ours.rate_per_s:g}/s"
    if "aiperf" not in round_.runs:  # --without-aiperf: the rate and the count alone
        if mo is None:
            return f"{where}: not measured ({ours.error})"
        return (f"{where}: rate within 1 % {'met' if abs(mo.error_pct) <= 1.0 else 'NOT met'} "
                f"({mo.error_pct:+.2f} %); p99 lateness {mo.server_p99_ms:.3f} ms (AIPerf not run); count "
                f"{mo.count} of {ours.requested}")
    (theirs, mt) = round_.runs["aiperf"]
    if mo is None or mt is None:
        return f"{where}: not measured ({ours.error or theirs.error})"
    rate_ok = abs(mo.error_pct) <= 1.0  # Poisson: against the rate of its own drawn schedule
    late_ok = mo.server_p99_ms <= mt.server_p99_ms
    count_ok = mo.count == ours.requested == mt.count
    return (f"{where}: rate within 1 % {'met' if rate_ok else 'NOT met'} ({mo.error_pct:+.2f} %); "
            f"p99 lateness <= AIPerf's {'met' if late_ok else 'NOT met'} ({mo.server_p99_ms:.3f} vs "
            f"{mt.server_p99_ms:.3f} ms); same count {'met' if count_ok else 'NOT met'} "
            f"({mo.count} vs {mt.count} of {ours.requested})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,200,1000", help="requests/s, comma-separated")
    parser.add_argument("--arrivals", default="constant", help="constant,poisson")
    parser.add_argument("--seconds", type=float, default=10.0, help="count = max(500, rate x seconds)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--aiperf", type=Path, default=AIPERF)
    parser.add_argument("--without-aiperf", action="store_true", help="time ours alone (no AIPerf venv needed)")
    parser.add_argument("--gc-off", action="store_true",
                        help="also run ours with the garbage collector frozen and off during the window")
    parser.add_argument("--dump", type=Path, help="write every run's raw times here (JSON), to look into")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores", flush=True)
    tools = ["ours", *([] if args.without_aiperf else ["aiperf"]), *(["ours-gc-off"] if args.gc_off else [])]
    server = Server()
    rounds = []
    try:
        for arrivals in args.arrivals.split(","):
            for rate in (float(r) for r in args.rates.split(",")):
                count = max(500, round(rate * args.seconds))
                for repeat in range(args.repeats):
                    runs = {}
                    for tool in tools if repeat % 2 == 0 else tools[::-1]:
                        server.reset()
                        run = (run_aiperf(server, arrivals, rate, count, args.aiperf) if tool == "aiperf"
                               else run_ours(server, arrivals, rate, count, gc_off=tool == "ours-gc-off"))
                        runs[tool] = (run, None if run.error or len(run.server_ns) < 2 else measure(run))
                        time.sleep(1.0)  # the tool's processes gone before the next
                    rounds.append(Round({tool: runs[tool] for tool in tools}))
                    print(rows(rounds[-1]), flush=True)
    finally:
        server.close()
    if args.dump:
        args.dump.write_text(json.dumps([dataclasses.asdict(run) for r in rounds for run, _ in r.runs.values()]))
    print("\n" + HEADER + "\n" + "\n".join(rows(r) for r in rounds) + "\n")
    print("\n".join(verdict(r, tool) for r in rounds for tool in tools if tool != "aiperf"))
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        url, arrivals, rate, count, out, gc_off = sys.argv[2:8]
        asyncio.run(_child(url, arrivals, float(rate), int(count), Path(out), gc_off == "gc-off"))
    else:
        main()
