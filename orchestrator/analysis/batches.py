"""Concurrent batches, one at a time: were their requests co-resident, how tightly did they arrive, what
failed. Co-resident (docs/conventions.md): the server showed min(N, C) of a batch of N running together, C
the arm's capacity where known. The server's own trace (the reference engine's engine steps) is exact and
preferred; vLLM's /metrics, sampled during the batch, is the fallback. A batch that was not co-resident tested
nothing about batching: its rows are kept out of the cell's verdict."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis.results import BatchCheck, Cell
from orchestrator.record.failures import TRANSPORT, kind_of

COLUMNS = ["phase_kind", "batch_id", "error", "error_kind", "batch_send_spread_ns", "batch_running_max",
           "batch_arrival_spread_ns", "batch_server_together"]
TRACE, METRICS = "server trace", "/metrics"
# /metrics was sampled during the batch, but no sample showed any of it running (each fell before its requests
# reached the engine or after they left, as on a loaded machine): how many ran together is not known
NOT_OBSERVED = "not observed"


def check(cell: Cell, capacity: int | None, rows: pa.Table) -> tuple[list[BatchCheck], np.ndarray]:
    """Each batch of a concurrent cell, and which rows stay in the verdict (all of them elsewhere)."""
    keep = np.ones(rows.num_rows, dtype=bool)
    if rows.num_rows == 0 or not pc.any(pc.equal(rows.column("phase_kind"), "concurrent")).as_py():
        return [], keep
    ids = rows.column("batch_id").to_numpy(zero_copy_only=False)
    columns = {name: rows.column(name).to_pylist() for name in COLUMNS[2:]}
    found = []
    for batch_id in dict.fromkeys(ids.tolist()):
        at = np.nonzero(ids == batch_id)[0]
        first = int(at[0])
        kinds = [kind_of(columns["error"][i], columns["error_kind"][i]) for i in at]
        errors = [k for k in kinds if k is not None]
        server = columns["batch_server_together"][first]
        sampled = columns["batch_running_max"][first]
        together = server if server is not None else seen_running(sampled)
        co_resident = None if together is None else together >= min(len(at), capacity or len(at))
        source = TRACE if server is not None else METRICS if together is not None else \
            NOT_OBSERVED if sampled is not None else None
        found.append(BatchCheck(
            cell.arm, cell.prompt_id, cell.phase, int(batch_id), len(at), len(errors),
            sum(k in TRANSPORT for k in errors),  # what load does to a batch (refused, timeouts, reads)
            _ms(columns["batch_send_spread_ns"][first]), _ms(columns["batch_arrival_spread_ns"][first]),
            together, source, capacity, co_resident))
        if co_resident is False or source == NOT_OBSERVED:  # nothing shown about batching: out of the verdict
            keep[at] = False
    _summarise(cell, capacity, found)
    return found, keep


def seen_running(running_max: int | None) -> int | None:
    """The most running requests /metrics showed while a batch or probe was in flight, or None where no sample
    showed it: a reading of 0 is a sample that missed the requests (they ran: they were answered), not a count."""
    return running_max if running_max is not None and running_max > 0 else None


def _summarise(cell: Cell, capacity: int | None, batches: list[BatchCheck]) -> None:
    cell.batch_size = min(b.size for b in batches)
    cell.capacity = capacity
    seen = [b.together for b in batches if b.together is not None]
    cell.min_running_observed = min(seen) if seen else None
    sends = [b.send_spread_ms for b in batches if b.send_spread_ms is not None]
    cell.max_send_spread_ms = max(sends) if sends else None
    arrivals = [b.arrival_spread_ms for b in batches if b.arrival_spread_ms is not None]
    cell.max_arrival_spread_ms = max(arrivals) if arrivals else None
    known = [b.co_resident for b in batches if b.co_resident is not None]
    cell.co_resident = all(known) if known else None
    cell.batches = len(batches)
    cell.batches_not_observed = sum(b.together_source == NOT_OBSERVED for b in batches)
    cell.batches_kept_out = sum(b.co_resident is False for b in batches) + cell.batches_not_observed
    cell.transport_errors = sum(b.transport_errors for b in batches)


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6
