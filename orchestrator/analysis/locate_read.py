"""What `locate` reads of a run's record: the measured answers of one arm and prompt (without their lists), which
requests have digests, the digest rows and answers of the two requests compared (filtered reads: a run's digests
run to megabytes per request), and the device and dtype the arm's engine said it ran with."""

from __future__ import annotations

import re
from typing import Any

import pyarrow.compute as pc

from orchestrator.analysis.results import SIGNATURE_BASES
from orchestrator.record.reads import read_where, rows_by_id
from orchestrator.record.recorded import RecordedRun

ANSWER = ["request_id", "attempt", "arm", "prompt_id", "phase", "phase_kind", "role", "start", "error",
          *SIGNATURE_BASES.values()]
DIGEST = ["request_id", "attempt", "engine_request_id", "step", "call", "module", "module_type", "rows_start",
          "rows_stop", "rows_total", "in_shape", "out_shape", "in_hash", "out_hash", "out_sum", "out_absmax",
          "out_norm", "out_head", "batch_size", "context_tokens"]
# The engine's startup line names both ("..., device cpu, dtype float32", "device cuda:0 (NVIDIA H100 80GB HBM3),
# dtype bfloat16"); the probe takes fp32 or bf16
STARTED = re.compile(r"device (\w+)[^,]*, dtype (\w+)")
PROBE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def has_digests(run: RecordedRun) -> bool:
    return bool(run.reads.parts("digests"))


def answers(run: RecordedRun, arm: str | None = None, prompt_id: str | None = None) -> list[dict[str, Any]]:
    """The measured answers of the arm's first start to the prompt (None: every arm, every prompt), latest
    attempts, without an error (the run's ledger: record/ledger.py)."""
    table = run.reads.ledger().select(ANSWER)
    if arm is not None and prompt_id is not None:
        table = table.filter(pc.and_(pc.equal(table.column("arm"), arm), pc.equal(table.column("prompt_id"),
                                                                                  prompt_id)))
    rows = table.to_pylist()
    return [r for r in rows if r["role"] in ("measured", None) and not r["start"] and r["error"] is None]


def digested(run: RecordedRun) -> dict[tuple[str, int], int]:
    """(request id, attempt) -> its batch size in the prefill, for every request with digests."""
    table = read_where(run.reads.parts("digests"), "digests", ["request_id", "attempt", "batch_size"], {"step": 0})
    out: dict[tuple[str, int], int] = {}
    for rid, attempt, size in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True):
        key = (rid, attempt or 0)
        out[key] = max(out.get(key, 0), size or 0)
    return out


def digest_rows(run: RecordedRun, wanted: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    """Request id -> its digest rows of attempt `wanted[id]`."""
    table = read_where(run.reads.parts("digests"), "digests", DIGEST, {"request_id": list(wanted)})
    out: dict[str, list[dict[str, Any]]] = {rid: [] for rid in wanted}
    for row in table.to_pylist():
        if (row["attempt"] or 0) == wanted[row["request_id"]]:
            out[row["request_id"]].append(row)
    return out


def tokens(run: RecordedRun, wanted: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Request id -> its token ids, top-k lists and top1 - top2 gaps (attempt `wanted[id]`), from the row groups
    that hold them."""
    columns = ["request_id", "attempt", "token_ids", "top_logprobs", "top_gaps"]
    rows = rows_by_id(run.reads.parts("responses"), sorted(wanted), columns)
    return {r["request_id"]: r for r in rows if (r["attempt"] or 0) == wanted[r["request_id"]]}


def device_and_dtype(run: RecordedRun, arm: str) -> tuple[str, str] | None:
    """The device kind ("cpu", "cuda") and the probe's dtype name the arm's engine logged at start."""
    logs = run.reads.table("logs")
    for text in logs.filter(pc.equal(logs.column("arm"), arm)).column("text").to_pylist():
        found = STARTED.search(text or "")
        if found and found.group(2) in PROBE_DTYPES:
            return found.group(1), PROBE_DTYPES[found.group(2)]
    return None
