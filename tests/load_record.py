"""A synthetic record of load phases (real Parquet through TableWriter, numbers chosen so that every cost is
known by hand), for the cost's and the report's tests while the load generator is built beside them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter

S = 1_000_000_000  # ns in a second
SPACING_S = 0.125  # one request every 125 ms: 8 a window
PER_WINDOW = 8


@dataclass
class ArmPlan:
    """One arm's load phase: a latency per window (its length is the window count), the probes' signatures."""

    latency_s: list[float]
    streamed: bool = True
    traced: bool = False
    running_max: int | None = None
    divergent_probes: int = 0  # probes (in order) that carry another signature
    ready_s: list[float] = field(default_factory=lambda: [4.1])  # time to ready of each start
    failed_starts: int = 0
    peak_memory_bytes: int | None = 2 * 2**30
    peak_gpu_memory_bytes: int | None = None  # None: the arm has no GPU
    tokens: bool = False  # probes carry token ids (a divergent probe's third token flips): top-1 flips counted
    rate_per_s: float = 8.0
    phase: str = "load_8"
    errors: int = 0  # background requests that failed, in window 0
    kind: str = "load"  # "sequential": the same probes, no load point (no cost to measure)


def _rows(arm: str, plan: ArmPlan) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    load = plan.kind == "load"
    base = {"study": "load", "run_id": "r1", "arm": arm, "phase": plan.phase, "phase_kind": plan.kind, "attempt": 0,
            "start": 0, "load_point": f"poisson {plan.rate_per_s:g}/s" if load else None,
            "offered_rate_per_s": plan.rate_per_s if load else None}
    rows.append({**base, "prompt_id": "bg", "role": "warmup", "batch_id": 0, "request_id": f"{arm}/{plan.phase}/warm",
                 "send_ns": 0, "scheduled_ns": 0, "recv_ns": 50 * S, "completion_tokens": 1})
    probe = step = failed = 0
    for window, latency_s in enumerate(plan.latency_s):
        t0 = (100 + 10 * window) * S
        for i in range(PER_WINDOW):
            send = t0 + int(i * SPACING_S * S)
            is_probe = i % 4 == 0
            error = None
            if not is_probe and failed < plan.errors and window == 0:
                error, failed = "server dropped the connection", failed + 1
            row = {**base, "prompt_id": "capital" if is_probe else "bg",
                   "role": "measured" if is_probe else "background", "batch_id": window,
                   "request_id": f"{arm}/{plan.phase}/{window}/{i}", "scheduled_ns": send - S // 1000,
                   "send_ns": send, "recv_ns": None if error else send + int(latency_s * S), "error": error,
                   "error_kind": "read" if error else None,
                   "completion_tokens": None if error else 10, "streamed": plan.streamed}
            if plan.streamed and not error:
                row["first_token_ns"] = send + int(latency_s * S / 5)
                row["inter_token_ns"] = [int(latency_s * S / 10)] * 9
            if plan.traced:  # one engine step every 125 ms, a request runs for 2 steps: overlaps 2 others
                row["server_first_step"], row["server_last_step"] = step, step + 2
                step += 1
            if plan.running_max is not None:
                row["batch_running_max"] = plan.running_max
            if is_probe:
                sig = "other" if probe < plan.divergent_probes else "modal"
                row |= {"sig_text": sig, "sig_token_ids": sig, "sig_top_logprobs": sig, "completion_text": sig}
                if plan.tokens:
                    row |= {"token_ids": [1, 2, 9 if sig == "other" else 3, 4], "token_logprobs": [-0.1] * 4}
                probe += 1
            rows.append(row)
    return rows


def _memory_note(plan: ArmPlan) -> str:
    """As run/arm/resources.py writes it: 'memory: ..., every 0.5 s; GPU memory: ...'."""
    memory = "cgroup" if plan.peak_memory_bytes else "not observable (no cgroup)"
    gpu = "nvidia-smi" if plan.peak_gpu_memory_bytes else "none, the arm has no GPUs"
    return f"memory: {memory}, every 0.5 s; GPU memory: {gpu}"


def write_load_record(root: Path, plans: Mapping[str, ArmPlan | list[ArmPlan]], baseline: str | None = None
                      ) -> RunPaths:
    """An arm given several plans has several phases (load points); its starts are the first plan's."""
    paths = RunPaths(root)
    paths.root.mkdir(parents=True, exist_ok=True)
    phases = {arm: plan if isinstance(plan, list) else [plan] for arm, plan in plans.items()}
    with TableWriter(paths, "responses", "r") as writer:
        for arm, each in phases.items():
            for plan in each:
                for row in _rows(arm, plan):
                    writer.append(row)
    with TableWriter(paths, "arms", "arms") as writer:
        for arm, (plan, *_) in phases.items():
            for start, ready_s in enumerate([*plan.ready_s, *[None] * plan.failed_starts]):
                writer.append({"study": "load", "run_id": "r1", "arm": arm, "start": start, "attempt": 0,
                               "config_json": "{}", "start_ns": 10 * S,
                               "ready_ns": None if ready_s is None else 10 * S + int(ready_s * S),
                               "status": "completed" if ready_s is not None else "failed",
                               "peak_memory_bytes": plan.peak_memory_bytes, "model": "tiny",
                               "peak_gpu_memory_bytes": plan.peak_gpu_memory_bytes, "model_revision": "abc123",
                               "memory_note": _memory_note(plan)})
    meta = {"study": "load", "run_id": "r1", "baseline": baseline or next(iter(plans)), "host": "test-host",
            "planned_arms": list(plans)}
    paths.meta.write_text(json.dumps(meta))
    return paths
