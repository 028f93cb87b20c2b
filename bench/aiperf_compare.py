"""Our cost figures against AIPerf's, on the same server at the same load points (issue 47 item 5): the study
run as a user runs it (`orchestrator run`, a process arm serving bench/recording_server.py with a known service
time, three load phases), exported with `orchestrator compare RUN --export aiperf`; then AIPerf
(`aiperf profile`, from its venv as bench/load_pacing.py runs it) against a fresh copy of that server at each
load point. Goal: our request throughput and the p50, p90 and p99 of request latency and time to first token
within 5 % of AIPerf's.

    .venv/bin/python bench/aiperf_compare.py [--server recording|reference] [--requests 200] [--keep DIR]

The servers: `recording` (bench/recording_server.py --ttft-ms, a process arm): the n-th completion request it
reads gets its first token after a lognormal quantile of median 100 ms (spread 0.5), then 7 more tokens 10 ms
apart, every request side by side. Its service times repeat every 100 requests, so both tools, each sending a
multiple of 100 at a load point, are served the same 100 times (ours after a cold request: an offset, not
another set). `reference`: the reference engine's image (Docker; AIPerf's copy started with `docker run`, the
arm's own flags) with every engine step 20 ms slower (--step-delay-ms 20), 8 tokens a request (ignore_eos), up
to 16 at once. Load points: constant 10/s and 40/s (no ceiling), a closed loop of 8; streamed; `requests` per
load point, one window. AIPerf sends the prompts ours sent at that load point, in the same order (its
single_turn dataset, read from our record).
Both figures come from each tool's `profile_export_aiperf.json`: ours is the export of our record (its
figures are report.json's cost), AIPerf's its own. On the recording server the table also gives what the server
was told to take (`planted`: the percentiles of its service times over the load point's requests, what a client
that adds nothing would measure) and each tool against it. `--keep DIR` copies both summaries there.
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
import urllib.request
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

IMAGE = "orchestrator/reference-engine:0.1.0"
REFERENCE = ["--served-model-name", "reference", "--seed", "0", "--max-num-seqs", "16", "--max-model-len", "8192",
             "--step-delay-ms", "20"]  # conf/arm/reference.yaml's engine_args, and the planted step

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


def _config(folder: Path, requests: int, server: str) -> Path:
    (folder / "arm").mkdir(parents=True)
    (folder / "protocol").mkdir()
    program = ROOT / "bench/recording_server.py"
    (folder / "arm/recording.yaml").write_text(ARM.format(python=sys.executable, server=program, port=_free_port(),
                                                          service=", ".join(SERVICE)))
    phases = {}
    for name, (rate, concurrency) in POINTS.items():
        load: dict[str, object] = {"rate_per_s": rate, "concurrency": concurrency, "requests": requests, "windows": 1,
                                   "stream": True, "seed": 0, "warmup": {"requests": 0}, "background_max_tokens": [8]}
        if rate is not None:
            load["arrivals"] = "constant"
        phases[name] = {"kind": "load", "load": load}
    request: dict[str, object] = {"max_tokens": 8, "temperature": 0.0, "logprobs": None}  # as AIPerf: no logprobs
    if server == "reference":
        request["extra"] = {"ignore_eos": True}
    protocol = {"name": "aiperf_compare", "request": request, "phases": phases}
    (folder / "protocol/aiperf_compare.yaml").write_text(json.dumps(protocol, indent=2))  # JSON is YAML
    return folder


def run_ours(work: Path, requests: int, server: str) -> dict[str, dict[str, object]]:
    """`orchestrator run` then `orchestrator compare --export aiperf`, as a user would: phase -> our summary."""
    config = _config(work / "config", requests, server)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATOR_PROCESS_DIR": str(work / "state")}
    run_dir = work / "run"
    arm = (["runtime=process", "arm@arms.baseline=recording"] if server == "recording"
           else ["+arms.baseline.engine_args.step-delay-ms=20"])
    steps = [["run", "--config-dir", str(config), *arm, "~arms.wide_batch", "protocol=aiperf_compare",
              "study.name=aiperf_compare", f"hydra.run.dir={run_dir}"],
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


def our_prompts(work: Path) -> dict[str, Path]:
    """Each load point's prompts as ours sent them, in order (probes and background), as AIPerf's single_turn
    dataset: AIPerf sends the same prompts (the engine's prefill depends on them)."""
    sys.path.insert(0, str(ROOT))
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import read_table

    rows = read_table(RunPaths(work / "run"), "responses", ["phase", "role", "send_ns", "request_json"]).to_pylist()
    out = {}
    for phase in POINTS:
        sent = sorted((r for r in rows if r["phase"] == phase and r["role"] in ("measured", "background")),
                      key=lambda r: r["send_ns"])
        out[phase] = work / f"prompts-{phase}.jsonl"
        out[phase].write_text("".join(json.dumps({"text": json.loads(r["request_json"])["prompt"]}) + "\n"
                                      for r in sent))
    return out


class Recording:
    """A fresh recording server in its own process."""

    def __enter__(self) -> str:
        self.process = subprocess.Popen([sys.executable, str(ROOT / "bench/recording_server.py"), "--port", "0",
                                         *SERVICE], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        return self.process.stdout.readline().split()[-1]

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        self.process.wait(10)


class Reference:
    """A fresh reference engine container, the arm's flags, ready."""

    def __enter__(self) -> str:
        port = _free_port()
        self.id = subprocess.run(["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:8000", IMAGE, "--host",
                                  "0.0.0.0", "--port", "8000", *REFERENCE], capture_output=True, text=True,
                                 check=True).stdout.strip()
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    return url
            except OSError:
                time.sleep(0.2)
        raise SystemExit("the reference engine did not become ready in 2 minutes")

    def __exit__(self, *_: object) -> None:
        subprocess.run(["docker", "rm", "-f", self.id], capture_output=True, check=False)


def run_aiperf(work: Path, phase: str, requests: int, server: str, prompts: Path) -> dict[str, object]:
    """AIPerf at one load point against a fresh copy of the server: its summary."""
    rate, concurrency = POINTS[phase]
    model = "recording" if server == "recording" else "reference"
    extra = [] if server == "recording" else ["--extra-inputs", "ignore_eos:true"]
    with Recording() if server == "recording" else Reference() as url:
        out = work / "aiperf" / phase
        load = (["--request-rate", f"{rate:g}", "--arrival-pattern", "constant"] if rate is not None
                else ["--concurrency", str(concurrency)])
        argv = [str(AIPERF), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
                "--streaming", "--tokenizer", str(TOKENIZER), *load, *extra, "--request-count", str(requests),
                "--random-seed", "0", "--input-file", str(prompts), "--custom-dataset-type", "single_turn",
                "--dataset-sampling-strategy", "sequential", "--osl", "8", "--ui", "none", "--no-server-metrics",
                "--no-gpu-telemetry", "--artifact-dir", str(out)]
        done = subprocess.run(argv, capture_output=True, text=True)
        print(f"$ aiperf profile {' '.join(load)} --request-count {requests} --streaming ...: exit "
              f"{done.returncode}", flush=True)
        if done.returncode != 0:
            raise SystemExit((done.stdout + done.stderr)[-3000:])
        return json.loads((out / "profile_export_aiperf.json").read_text())  # type: ignore[no-any-return]


def planted(requests: int) -> dict[tuple[str, str], float]:
    """The recording server's own service times at a load point (any `requests` in a row: the same set), in ms:
    what a client that adds nothing would measure; numpy's linear percentiles, as both tools take them."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from recording_server import Service

    ttft_ms, gap_ms, tokens = (float(SERVICE[i]) for i in (1, 5, 7))
    service = Service(ttft_ms / 1e3, float(SERVICE[3]), gap_ms / 1e3, int(tokens))
    first = np.array([service.ttft_s(n) * 1e3 for n in range(requests)])
    out = {}
    for metric, times in (("time_to_first_token", first), ("request_latency", first + (tokens - 1) * gap_ms)):
        for q in (50, 90, 99):
            out[(metric, f"p{q}")] = float(np.percentile(times, q))
    return out


def value(summary: dict[str, object], metric: str, stat: str) -> float:
    block = summary[metric]
    assert isinstance(block, dict)
    return float(block[stat])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["recording", "reference"], default="recording")
    parser.add_argument("--requests", type=int, default=200, help="per load point: a multiple of 100")
    parser.add_argument("--keep", type=Path, help="copy both tools' profile_export_aiperf.json here")
    args = parser.parse_args()
    if args.requests % 100:
        raise SystemExit("--requests: a multiple of 100 (the server's service times repeat every 100)")
    flags = SERVICE if args.server == "recording" else [IMAGE, *REFERENCE]
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; server {args.server}: "
          f"{' '.join(flags)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="aiperf-compare-") as tmp:
        work = Path(tmp)
        ours = run_ours(work, args.requests, args.server)
        prompts = our_prompts(work)
        theirs = {}
        for phase in POINTS:
            time.sleep(1.0)  # the last tool's processes gone
            theirs[phase] = run_aiperf(work, phase, args.requests, args.server, prompts[phase])
        if args.keep:
            for phase in POINTS:
                for tool, summary in (("ours", ours[phase]), ("aiperf", theirs[phase])):
                    (args.keep / tool / phase).mkdir(parents=True, exist_ok=True)
                    (args.keep / tool / phase / "profile_export_aiperf.json").write_text(
                        json.dumps(summary, indent=2) + "\n")
        shutil.rmtree(work / "state", ignore_errors=True)
    truth = planted(args.requests) if args.server == "recording" else {}
    print("\n| load point | metric | ours | AIPerf | ours vs AIPerf | planted | ours vs planted | AIPerf vs "
          "planted |\n|" + " --- |" * 8)
    worst = 0.0
    for phase in POINTS:
        for metric, stat in COMPARED:
            mine, other = value(ours[phase], metric, stat), value(theirs[phase], metric, stat)
            diff = 100 * (mine - other) / other
            worst = max(worst, abs(diff))
            unit = ours[phase][metric]["unit"]  # type: ignore[index]
            known = truth.get((metric, stat))
            against = ("| - | - | - |" if known is None else f"| {known:.2f} | {100 * (mine - known) / known:+.2f} % "
                       f"| {100 * (other - known) / known:+.2f} % |")
            print(f"| {phase} | {metric} {stat} ({unit}) | {mine:.2f} | {other:.2f} | {diff:+.2f} % {against}")
    counts = {phase: (value(ours[phase], "request_count", "avg"), value(theirs[phase], "request_count", "avg"))
              for phase in POINTS}
    print(f"\ncompleted requests (ours, AIPerf's): {counts}")
    print(f"within {GOAL_PCT:g} %: {'met' if worst <= GOAL_PCT else 'NOT met'} (largest difference {worst:.2f} %)")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
