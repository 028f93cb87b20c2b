"""A planted cost whose truth is known exactly (bench/cost_calibration.py --planted recording): two process arms
serving bench/recording_server.py with a known service time, `base` with median time to first token TTFT_MS and a
token every GAP_MS, `slow` with twice both (the same spread; every request's time to first token its own seeded
lognormal draw, other seeds per arm and per trial, `--seed`). The servers take every request side by side, so
latency, time to first token and inter-token latency are 2 times base's by construction at any load, and at a
closed loop request throughput is 0.5 times base's. Two load points, each a phase of one `orchestrator run`
(runtime=process, arms side by side): `load`, conf/protocol/load.yaml's as it is (Poisson 8/s, at most 16 at once,
6 windows of 12, a warm-up of 4), and `closed`, the same with a closed loop of CLOSED_CONCURRENCY.

The client's own overhead (sending, reading, parsing) adds to what the server was told to take: each trial also
measures it, from the record, as the mean of each request's time to first token less the server's draw for it
(the n-th completion a server read got draw n: read in send order, close enough for a mean)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from aiperf_compare import ARM, _free_port  # noqa: E402  (a process arm of the recording server: one template)
from recording_server import Service  # noqa: E402

from orchestrator.analysis import cost, pairing  # noqa: E402
from orchestrator.record.paths import RunPaths  # noqa: E402
from orchestrator.record.tables import read_table  # noqa: E402

TTFT_MS, GAP_MS, SPREAD, TOKENS = 100.0, 10.0, 0.5, 8
CLOSED_CONCURRENCY = 4
PHASES = ("load", "closed")
TRUTH = {"latency_s": 2.0, "time_to_first_token_s": 2.0, "inter_token_latency_s": 2.0}
CLOSED_TRUTH = {**TRUTH, "request_throughput_per_s": 0.5}  # a closed loop: each slot's requests take twice as long

STUDY = """# @package _global_
defaults:
  - /arm@arms.base: planted_base
  - /arm@arms.slow: planted_slow
  - override /protocol: planted_load
study:
  name: planted_recording
  description: the recording server, and twice its service time in `slow`
  baseline: base
  parallel_arms: auto
  variables:
    slow: [command, port]
"""


@dataclass(frozen=True)
class Arm:
    name: str
    service: Service
    port: int

    def argv(self) -> list[str]:
        s = self.service
        return ["--ttft-ms", f"{s.ttft_median_s * 1e3:g}", "--spread", f"{s.spread:g}", "--gap-ms",
                f"{s.gap_s * 1e3:g}", "--tokens", str(s.tokens), "--seed", str(s.seed)]


def services(trial: int) -> dict[str, Service]:
    """base and slow of one trial: twice the time in slow, each its own seed (per arm and per trial)."""
    return {"base": Service(TTFT_MS / 1e3, SPREAD, GAP_MS / 1e3, TOKENS, seed=2 * trial),
            "slow": Service(2 * TTFT_MS / 1e3, SPREAD, 2 * GAP_MS / 1e3, TOKENS, seed=2 * trial + 1)}


def config(folder: Path, pair: list[Arm]) -> Path:
    """A config dir (--config-dir) with the two arms, the study and its protocol: load.yaml and a closed loop."""
    for sub in ("arm", "study", "protocol"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for arm in pair:
        (folder / f"arm/planted_{arm.name}.yaml").write_text(ARM.format(
            python=sys.executable, server=ROOT / "bench/recording_server.py", port=arm.port,
            service=", ".join(json.dumps(a) for a in arm.argv())))
    protocol = yaml.safe_load((ROOT / "conf/protocol/load.yaml").read_text())
    closed = json.loads(json.dumps(protocol["phases"]["load"]))
    closed["load"].update(rate_per_s=None, concurrency=CLOSED_CONCURRENCY)
    closed["load"].pop("arrivals", None)
    protocol["phases"]["closed"] = closed
    protocol["name"] = "planted_load"
    (folder / "protocol/planted_load.yaml").write_text(json.dumps(protocol, indent=2))
    (folder / "study/planted_recording.yaml").write_text(STUDY)
    return folder


def run(trial: int, run_dir: Path, work_dir: Path) -> None:
    """One trial as a user runs it: `orchestrator run` on its own config dir."""
    pair = [Arm(name, service, _free_port()) for name, service in services(trial).items()]
    folder = config(work_dir / f"config-{trial}", pair)
    command = [sys.executable, "-m", "orchestrator", "run", "--config-dir", str(folder), "runtime=process",
               "study=planted_recording", f"protocol.phases.load.load.seed={trial}",
               f"protocol.phases.closed.load.seed={trial}", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATOR_PROCESS_DIR": str(work_dir / "state")}
    done = subprocess.run(command, cwd=work_dir, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trial {trial} failed ({done.returncode}): {done.stdout[-1500:]}{done.stderr[-2000:]}")


@dataclass(frozen=True)
class Served:
    """One trial as its servers served it: per arm, the client's overhead on time to first token (the mean of its
    requests' less the server's draws, every phase, warm-ups included, as the server counted them); per load
    point, slow/base of the mean draw over the counted requests (what the trial's interval estimates, less the
    client)."""

    overhead_s: dict[str, float]
    drawn_ratio: dict[str, float]


def served(run_dir: Path, trial: int) -> Served:
    rows = read_table(RunPaths(run_dir), "responses", ["arm", "phase", "role", "send_ns", "first_token_ns"])
    overhead, drawn_mean = {}, {}
    for name, service in services(trial).items():
        sent = sorted((r for r in rows.to_pylist() if r["arm"] == name), key=lambda r: r["send_ns"])
        measured = [(r["first_token_ns"] - r["send_ns"]) / 1e9 for r in sent if r["first_token_ns"] is not None]
        drawn = [service.ttft_s(n) for n in range(len(sent))]
        overhead[name] = sum(measured) / len(measured) - sum(drawn) / len(drawn)
        for phase in PHASES:
            mine = [d for r, d in zip(sent, drawn, strict=True)
                    if r["phase"] == phase and r["role"] in ("measured", "background")]
            drawn_mean[(name, phase)] = sum(mine) / len(mine)
    return Served(overhead, {phase: drawn_mean[("slow", phase)] / drawn_mean[("base", phase)] for phase in PHASES})


def every_window(run_dir: Path) -> dict[tuple[str, str], pairing.Ratio]:
    """slow/base per (load point, metric) as the report's cost finds it, but over every counted window: no steady
    cut (analysis/cost.py's own windows and pairing, with every row kept), to tell what the cut does."""
    groups = cost.load_groups(RunPaths(run_dir))
    out = {}
    for phase in PHASES:
        sides = {}
        for arm in ("base", "slow"):
            rows = groups[(arm, phase)]
            ids, per, _ = cost._per_window(rows, np.ones(len(rows["send_ns"]), dtype=bool))
            sides[arm] = ids, per, pairing.schedules(rows, ids)
        (ids_a, per_a, sched_a), (ids_b, per_b, sched_b) = sides["base"], sides["slow"]
        for metric in CLOSED_TRUTH:
            out[(phase, metric)] = pairing.window_ratio(ids_a, per_a[metric], sched_a, ids_b, per_b[metric], sched_b)
    return out
