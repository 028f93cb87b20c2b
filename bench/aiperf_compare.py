"""Our cost figures against AIPerf's, on the same server at the same load points (issue 47 item 5): the study
run as a user runs it (`orchestrator run`, a process arm serving bench/recording_server.py with a known service
time, three load phases), exported with `orchestrator compare RUN --export aiperf`; then AIPerf
(`aiperf profile`, from its venv as bench/load_pacing.py runs it) against a fresh copy of that server at each
load point. Goal: our request throughput and the p50, p90 and p99 of request latency and time to first token
within 5 % of AIPerf's.

    .venv/bin/python bench/aiperf_compare.py [--requests 200] [--keep DIR]

The server (bench/recording_server.py --ttft-ms): the n-th completion request it reads gets its first token
after a lognormal quantile of median 100 ms (spread 0.5), then 7 more tokens 10 ms apart, every request side by
side. Its service times repeat every 100 requests, so both tools, each sending a multiple of 100 at a load
point, are served the same 100 times (ours after a cold request: an offset, not another set). Load points:
constant 10/s and 40/s (no ceiling), a closed loop of 8; streamed; `requests` per load point, one window.
Both figures come from each tool's `profile_export_aiperf.json`: ours is the export of our record (its
figures are report.json's cost), AIPerf's its own. `--keep DIR` copies both summaries there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AIPERF = Path.home() / ".cache/orchestrator/aiperf-venv/bin/aiperf"
TOKENIZER = Path.home() / ".cache/orchestrator/models/tiny-llama"
SERVICE = ["--ttft-ms", "100", "--spread", "0.5", "--gap-ms", "10", "--tokens", "8"]
# phase name -> (rate per s or None for a closed loop, concurrency)
POINTS = {"constant_10": (10.0, None), "constant_40": (40.0, None), "closed_8": (None, 8)}
COMPARED = [("request_throughput", "avg"), *((m, p) for m in ("request_latency", "time_to_first_token")
                                              for p in ("p50", "p90", "p99"))]
GOAL_PCT = 5.0

ARM = """engine: openai
description: bench/recording_server.py with a known service time
image: process
command: [{python}, {server}, --host, 127.0.0.1, --port, "{port}", {service}]
port: {port}
served_model_name: recording
metrics_path: null
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(folder: Path, requests: int) -> Path:
    (folder / "arm").mkdir(parents=True)
    (folder / "protocol").mkdir()
    server = ROOT / "bench/recording_server.py"
    (folder / "arm/recording.yaml").write_text(ARM.format(python=sys.executable, server=server, port=_free_port(),
                                                          service=", ".join(SERVICE)))
    phases = {}
    for name, (rate, concurrency) in POINTS.items():
        load: dict[str, object] = {"rate_per_s": rate, "concurrency": concurrency, "requests": requests, "windows": 1,
                                   "stream": True, "seed": 0, "warmup": {"requests": 0}}
        if rate is not None:
            load["arrivals"] = "constant"
        phases[name] = {"kind": "load", "load": load}
    protocol = {"name": "aiperf_compare", "request": {"max_tokens": 8, "temperature": 0.0}, "phases": phases}
    (folder / "protocol/aiperf_compare.yaml").write_text(json.dumps(protocol, indent=2))  # JSON is YAML
    return folder


def run_ours(work: Path, requests: int) -> dict[str, dict[str, object]]:
    """`orchestrator run` then `orchestrator compare --export aiperf`, as a user would: phase -> our summary."""
    config = _config(work / "config", requests)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATOR_PROCESS_DIR": str(work / "state")}
    run_dir = work / "run"
    steps = [["run", "--config-dir", str(config), "runtime=process", "arm@arms.baseline=recording",
              "~arms.wide_batch", "protocol=aiperf_compare", "study.name=aiperf_compare", f"hydra.run.dir={run_dir}"],
             ["compare", str(run_dir), "--export", "aiperf"]]
    for argv in steps:
        done = subprocess.run([sys.executable, "-m", "orchestrator", *argv], cwd=work, env=env, capture_output=True,
                              text=True)
        print(f"$ orchestrator {' '.join(argv[:1])} ...: exit {done.returncode}; "
              f"{(done.stderr.strip().splitlines() or [''])[-1]}", flush=True)
        if done.returncode != 0:
            raise SystemExit(done.stdout[-2000:] + done.stderr[-3000:])
    return {phase: json.loads((run_dir / "aiperf/baseline" / phase / "profile_export_aiperf.json").read_text())
            for phase in POINTS}


def run_aiperf(work: Path, phase: str, requests: int) -> dict[str, object]:
    """AIPerf at one load point against a fresh copy of the server: its summary."""
    rate, concurrency = POINTS[phase]
    server = subprocess.Popen([sys.executable, str(ROOT / "bench/recording_server.py"), "--port", "0", *SERVICE],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[-1]
        out = work / "aiperf" / phase
        load = (["--request-rate", f"{rate:g}", "--arrival-pattern", "constant"] if rate is not None
                else ["--concurrency", str(concurrency)])
        argv = [str(AIPERF), "profile", "--model", "recording", "--url", url, "--endpoint-type", "completions",
                "--streaming", "--tokenizer", str(TOKENIZER), *load, "--request-count", str(requests),
                "--random-seed", "0", "--isl", "8", "--osl", "8", "--ui", "none", "--no-server-metrics",
                "--no-gpu-telemetry", "--artifact-dir", str(out)]
        done = subprocess.run(argv, capture_output=True, text=True)
        print(f"$ aiperf profile {' '.join(load)} --request-count {requests} --streaming ...: exit "
              f"{done.returncode}", flush=True)
        if done.returncode != 0:
            raise SystemExit((done.stdout + done.stderr)[-3000:])
        return json.loads((out / "profile_export_aiperf.json").read_text())  # type: ignore[no-any-return]
    finally:
        server.terminate()
        server.wait(10)


def value(summary: dict[str, object], metric: str, stat: str) -> float:
    block = summary[metric]
    assert isinstance(block, dict)
    return float(block[stat])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="per load point: a multiple of 100")
    parser.add_argument("--keep", type=Path, help="copy both tools' profile_export_aiperf.json here")
    args = parser.parse_args()
    if args.requests % 100:
        raise SystemExit("--requests: a multiple of 100 (the server's service times repeat every 100)")
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; server {' '.join(SERVICE)}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="aiperf-compare-") as tmp:
        work = Path(tmp)
        ours = run_ours(work, args.requests)
        theirs = {}
        for phase in POINTS:
            time.sleep(1.0)  # the last tool's processes gone
            theirs[phase] = run_aiperf(work, phase, args.requests)
        if args.keep:
            for phase in POINTS:
                for tool, summary in (("ours", ours[phase]), ("aiperf", theirs[phase])):
                    (args.keep / tool / phase).mkdir(parents=True, exist_ok=True)
                    (args.keep / tool / phase / "profile_export_aiperf.json").write_text(
                        json.dumps(summary, indent=2) + "\n")
        shutil.rmtree(work / "state", ignore_errors=True)
    print("\n| load point | metric | ours | AIPerf | ours vs AIPerf |\n| --- | --- | --- | --- | --- |")
    worst = 0.0
    for phase in POINTS:
        for metric, stat in COMPARED:
            mine, other = value(ours[phase], metric, stat), value(theirs[phase], metric, stat)
            diff = 100 * (mine - other) / other
            worst = max(worst, abs(diff))
            unit = ours[phase][metric]["unit"]  # type: ignore[index]
            print(f"| {phase} | {metric} {stat} ({unit}) | {mine:.2f} | {other:.2f} | {diff:+.2f} % |")
    counts = {phase: (value(ours[phase], "request_count", "avg"), value(theirs[phase], "request_count", "avg"))
              for phase in POINTS}
    print(f"\ncompleted requests (ours, AIPerf's): {counts}")
    print(f"within {GOAL_PCT:g} %: {'met' if worst <= GOAL_PCT else 'NOT met'} (largest difference {worst:.2f} %)")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
