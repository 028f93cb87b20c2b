"""A run's load phases as AIPerf's profile export (`orchestrator compare RUN --export aiperf`, docs/load.md):
per arm and load phase (one load point) a folder DIR/aiperf/ARM/PHASE/ with `profile_export.jsonl` (a record per
request sent: AIPerf's `MetricRecordInfo`) and `profile_export_aiperf.json` (the summary: AIPerf's
`JsonExportData`, schema 1.4), in AIPerf 0.13's metric tags and display units (ms, tokens, requests/sec), so
AIPerf's own readers take them (`aiperf plot DIR/aiperf`, its Pydantic models). The rows and figures are the
cost's (analysis/cost.py): the same requests (probes and background of start 0, no warm-up), the same
per-request times, the same throughput (completed requests over the windows' summed spans)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.analysis.cost import load_groups, phase_cost, request_times
from orchestrator.errors import ConfigError
from orchestrator.record.paths import RunPaths, atomic_write_text

SCHEMA_VERSION = "1.4"  # AIPerf's JsonExportData.SCHEMA_VERSION (0.13)
RECORDS = "profile_export.jsonl"
SUMMARY = "profile_export_aiperf.json"
FORMATS = ("aiperf",)  # `compare --export`'s choices
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)  # AIPerf's band, numpy's linear percentiles
EXTRA = ("request_id", "prompt_tokens", "error", "error_kind", "http_status")
Groups = dict[tuple[str, str], dict[str, Any]]


def load_phases(sources: list[RunPaths]) -> Groups:
    """The load phases' rows of the runs compared; none is bad input (read before any report is re-made)."""
    groups = load_groups(sources, EXTRA)
    if not groups:
        names = ", ".join(str(p.root) for p in sources)
        raise ConfigError(f"--export aiperf: {names} has no load phase to export; AIPerf's profile export is of "
                          "load points (a phase with `kind: load`, docs/load.md)")
    return groups


def write(groups: Groups, out: Path) -> str:
    """Each (arm, phase) into out/ARM/PHASE/; the line that says where they went."""
    sent = 0
    for (arm, phase), rows in groups.items():
        folder = out / arm / phase
        folder.mkdir(parents=True, exist_ok=True)
        lines = records(phase, rows)
        sent += len(lines)
        atomic_write_text(folder / RECORDS, "".join(json.dumps(line) + "\n" for line in lines))
        atomic_write_text(folder / SUMMARY, json.dumps(summary(arm, phase, rows, lines), indent=2) + "\n")
    return (f"AIPerf profile export: {out} ({len(groups)} load point(s), {sent} requests; "
            f"`aiperf plot {out}` reads it)")


def _sent(rows: dict[str, Any]) -> list[int]:
    """The rows of requests that were sent, in the order they were: AIPerf records no request it did not send."""
    send = rows["send_ns"]
    return sorted(np.flatnonzero(~np.isnan(send)).tolist(), key=lambda i: send[i])


def _ms(seconds: float) -> float:
    return seconds * 1e3


def records(phase: str, rows: dict[str, Any]) -> list[dict[str, Any]]:
    """AIPerf's per-request records (MetricRecordInfo), values in its display units."""
    times = request_times(rows)
    gaps = rows["gaps"].to_pylist()
    out = []
    for session, i in enumerate(_sent(rows)):
        send, recv = int(rows["send_ns"][i]), rows["recv_ns"][i]
        scheduled = rows["scheduled_ns"][i]
        metadata = {"session_num": session, "x_request_id": rows["request_id"][i], "turn_index": 0,
                    "credit_issued_ns": None if math.isnan(scheduled) else int(scheduled),
                    "request_start_ns": send, "request_end_ns": send if math.isnan(recv) else int(recv),
                    "worker_id": "orchestrator", "record_processor_id": "orchestrator",
                    "benchmark_phase": "profiling", "phase_index": 0, "profiling_index": 0, "phase_name": phase,
                    "phase_kind": "profiling", "was_cancelled": False}
        isl = rows["prompt_tokens"][i]
        if not times.ok[i]:
            error = {"code": rows["http_status"][i], "type": rows["error_kind"][i],
                     "message": rows["error"][i] or "no answer"}
            out.append({"metadata": metadata, "metrics": {} if isl is None else {"error_isl": _value(isl, "tokens")},
                        "error": error})
            continue
        osl = rows["completion_tokens"][i]
        metrics = {"request_latency": _value(_ms(times.latency_s[i]), "ms")}
        if times.streamed[i] and not math.isnan(times.time_to_first_token_s[i]):
            metrics |= _streamed(times.latency_s[i], times.time_to_first_token_s[i], gaps[i] or [], osl)
        if isl is not None:
            metrics["input_sequence_length"] = _value(isl, "tokens")
        if not math.isnan(osl):
            metrics["output_sequence_length"] = _value(int(osl), "tokens")
            if osl > 0:
                metrics["output_token_count"] = _value(int(osl), "tokens")
        out.append({"metadata": metadata, "metrics": metrics})
    return out


def _streamed(latency_s: float, ttft_s: float, gaps_ns: list[int], osl: float) -> dict[str, dict[str, Any]]:
    """A streamed request's token times, as AIPerf defines them: its inter-token latency is (latency - time to
    first token) / (output tokens - 1), its inter-chunk latency every gap between token chunks."""
    out = {"time_to_first_token": _value(_ms(ttft_s), "ms")}
    if gaps_ns:
        out["time_to_second_token"] = _value(gaps_ns[0] / 1e6, "ms")
        out["inter_chunk_latency"] = _value([gap / 1e6 for gap in gaps_ns], "ms")
    if not math.isnan(osl) and osl >= 2:
        itl_ms = _ms(latency_s - ttft_s) / (osl - 1)
        out["inter_token_latency"] = _value(itl_ms, "ms")
        if itl_ms > 0:
            out["output_token_throughput_per_user"] = _value(1e3 / itl_ms, "tokens/sec/user")
    return out


def _value(value: Any, unit: str) -> dict[str, Any]:
    return {"value": value, "unit": unit}


def stats(values: list[float] | np.ndarray, unit: str) -> dict[str, Any] | None:
    """AIPerf's stats block of a record metric: avg, p1..p99 (linear), min, max, the population std, count,
    sum; None where nothing measured it (AIPerf leaves the metric out)."""
    array = np.asarray(values, dtype=np.float64)
    array = array[~np.isnan(array)]
    if not array.size:
        return None
    out: dict[str, Any] = {"unit": unit, "avg": float(array.mean())}
    out |= {f"p{q}": float(v) for q, v in zip(PERCENTILES, np.percentile(array, PERCENTILES), strict=True)}
    return out | {"min": float(array.min()), "max": float(array.max()), "std": float(array.std()),
                  "count": int(array.size), "sum": float(array.sum())}


def summary(arm: str, phase: str, rows: dict[str, Any], lines: list[dict[str, Any]]) -> dict[str, Any]:
    """AIPerf's summary (JsonExportData) of one load point: its records' stats, the cost's throughput."""
    cost = phase_cost(arm, phase, rows)
    done = [line["metrics"] for line in lines if "error" not in line]

    def each(tag: str) -> list[Any]:
        return [m[tag]["value"] for m in done if tag in m]

    throughput, tokens_per_s = cost.request_throughput_per_s.avg, cost.output_tokens_per_s.avg
    duration_s = len(done) / throughput if throughput else None
    osl, isl = each("output_sequence_length"), each("input_sequence_length")
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "benchmark_id": f"{arm}/{phase}",
                           "request_throughput": _scalar(throughput, "requests/sec"),
                           "request_count": _scalar(len(done), "requests")}
    for tag, unit in (("request_latency", "ms"), ("time_to_first_token", "ms"), ("time_to_second_token", "ms"),
                      ("inter_token_latency", "ms"), ("output_token_throughput_per_user", "tokens/sec/user"),
                      ("output_sequence_length", "tokens"), ("input_sequence_length", "tokens"),
                      ("output_token_count", "tokens")):
        out[tag] = stats(each(tag), unit)
    out["inter_chunk_latency"] = stats([gap for gaps in each("inter_chunk_latency") for gap in gaps], "ms")
    out |= {"output_token_throughput": _scalar(tokens_per_s, "tokens/sec"),
            "total_output_tokens": _scalar(sum(osl), "tokens") if osl else None,
            "total_osl": _scalar(sum(osl), "tokens") if osl else None,
            "total_isl": _scalar(sum(isl), "tokens") if isl else None,
            "benchmark_duration": _scalar(duration_s, "sec")}
    errors = [line["error"] for line in lines if "error" in line]
    if errors:
        out["error_request_count"] = _scalar(len(errors), "requests")
    kinds: dict[str, tuple[dict[str, Any], int]] = {}
    for error in errors:
        key = json.dumps(error, sort_keys=True)
        kinds[key] = (error, kinds.get(key, (error, 0))[1] + 1)
    starts = [line["metadata"]["request_start_ns"] for line in lines]
    ends = [line["metadata"]["request_end_ns"] for line in lines]
    out |= {"run_info": {"benchmark_id": f"{arm}/{phase}", "run_label": f"{arm}/{phase}",
                         "variation_label": next((p for p in rows["load_point"] if p), None)},
            "was_cancelled": False, "is_complete": True,
            "error_summary": [{"error_details": error, "count": n} for error, n in kinds.values()],
            "start_time": _iso(min(starts)) if starts else None, "end_time": _iso(max(ends)) if ends else None}
    return {key: value for key, value in out.items() if value is not None}  # AIPerf leaves unset fields out


def _scalar(value: float | None, unit: str) -> dict[str, Any] | None:
    """A derived metric: its one value as avg (AIPerf gives it no count)."""
    return None if value is None else {"unit": unit, "avg": float(value)}


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat()
