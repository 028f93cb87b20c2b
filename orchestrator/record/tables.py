"""The Parquet record: explicit schemas, streaming writers with atomic part files, readers.

One dataset (a folder of part files) per table under RUN/data/. Rows are buffered briefly and
flushed to a new part file (temporary name, then rename), so a crash keeps every flushed part and
readers never see a half-written file. pandas, polars and duckdb read each folder directly.
"""

from __future__ import annotations

import io
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths, atomic_write_bytes

SCHEMA_VERSION = "1"

_TOP = pa.struct([("token", pa.string()), ("logprob", pa.float64())])
_PROMPT_TOP = pa.struct([("token_id", pa.int64()), ("token", pa.string()), ("logprob", pa.float64()),
                         ("rank", pa.int64())])

RESPONSES = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()),
    ("prompt_id", pa.string()), ("phase", pa.string()), ("phase_kind", pa.string()),
    ("batch_id", pa.int64()), ("repeat", pa.int64()), ("request_index", pa.int64()),
    ("cold", pa.bool_()),
    ("prompt_sha256", pa.string()), ("prompt_chars", pa.int64()), ("prompt_tokens", pa.int64()),
    ("request_json", pa.string()),
    ("response_body", pa.binary()),  # exactly the bytes received
    ("http_status", pa.int64()), ("error", pa.string()),
    ("send_ns", pa.int64()), ("recv_ns", pa.int64()),
    ("batch_send_spread_ns", pa.int64()),  # concurrent: last send - first send of the batch
    ("batch_running_max", pa.int64()),  # concurrent: most running requests /metrics showed meanwhile
    ("completion_text", pa.string()), ("finish_reason", pa.string()), ("completion_tokens", pa.int64()),
    ("token_ids", pa.list_(pa.int64())), ("tokens", pa.list_(pa.string())),
    ("token_logprobs", pa.list_(pa.float64())),
    ("top_logprobs", pa.list_(pa.list_(_TOP))),
    ("top_gaps", pa.list_(pa.float64())),  # per generated position: top1 - top2 logprob
    # per generated position: how many top-logprob entries came back (fewer than asked: keys collapsed)
    ("top_logprobs_entries", pa.list_(pa.int64())),
    ("prompt_logprobs", pa.list_(pa.list_(_PROMPT_TOP))),  # null entry at position 0, as served
    ("sig_text", pa.string()), ("sig_token_ids", pa.string()),
    ("sig_top_logprobs", pa.string()), ("sig_logprob_vector", pa.string()),
])

LOGS = pa.schema([
    ("run_id", pa.string()), ("arm", pa.string()), ("container_id", pa.string()),
    ("stream", pa.string()), ("seq", pa.int64()), ("timestamp", pa.string()), ("text", pa.string()),
])

ARMS = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()), ("config_json", pa.string()),
    ("image_ref", pa.string()), ("image_id", pa.string()), ("image_repo_digests", pa.list_(pa.string())),
    ("docker_run", pa.string()), ("env_json", pa.string()),  # secrets redacted
    ("container_id", pa.string()), ("fingerprint_json", pa.string()), ("matrix_key", pa.string()),
    ("start_ns", pa.int64()), ("ready_ns", pa.int64()), ("stop_ns", pa.int64()),
    ("exit_code", pa.int64()), ("status", pa.string()), ("error", pa.string()),
])

# One row per kernel-probe cell (orchestrator/probes/gemm.py; docs/probes.md says what each column means).
PROBES = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("process", pa.int64()), ("image", pa.string()),
    ("torch", pa.string()), ("gpu", pa.string()), ("device", pa.string()),
    ("shape", pa.string()), ("op", pa.string()), ("arm", pa.string()), ("dtype", pa.string()),
    ("scale_layout", pa.string()), ("scale_values", pa.string()), ("scale_storage", pa.string()),
    ("kernel_layout", pa.string()), ("impl", pa.string()), ("negative_control", pa.bool_()),
    ("M", pa.int64()), ("N", pa.int64()), ("K", pa.int64()), ("seed", pa.int64()), ("mode", pa.string()),
    ("perturb_allocator", pa.bool_()), ("repeats", pa.int64()), ("distinct_digests", pa.int64()),
    ("divergent_repeats", pa.int64()), ("upper_bound_95", pa.float64()),
    ("first_digest", pa.string()), ("digests", pa.list_(pa.string())), ("out_ptrs_distinct", pa.int64()),
    ("hash_repeats", pa.int64()), ("hash_divergent", pa.int64()),
    ("processes_agree", pa.bool_()), ("process_digests", pa.list_(pa.string())),
    ("row0_ref_m", pa.int64()), ("row0_bits_equal_m1", pa.bool_()), ("row0_max_ulps_vs_m1", pa.float64()),
    ("row0_ulps_vs_float64", pa.float64()), ("max_ulps_vs_float64", pa.float64()),
    ("layout_ok", pa.bool_()), ("flagged", pa.bool_()), ("unsupported", pa.string()), ("note", pa.string()),
    ("device_loop_s", pa.float64()), ("device_compare_s", pa.float64()), ("hash_loop_s", pa.float64()),
    ("device_s_per_call", pa.float64()), ("hash_s_per_call", pa.float64()), ("speedup_per_call", pa.float64()),
    ("wall_s", pa.float64()),
])

SCHEMAS = {"responses": RESPONSES, "logs": LOGS, "arms": ARMS, "probes": PROBES}


def _with_metadata(name: str) -> pa.Schema:
    return SCHEMAS[name].with_metadata({"orchestrator.schema_version": SCHEMA_VERSION,
                                        "orchestrator.table": name})


class TableWriter:
    """Append rows; every `flush_rows` rows or `flush_s` seconds (and on close) they land as one atomic
    part file."""

    def __init__(self, paths: RunPaths, table: str, part_prefix: str, flush_rows: int = 256,
                 flush_s: float = 2.0, on_row: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.folder = paths.table(table)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.schema = _with_metadata(table)
        self.prefix = _safe(part_prefix)
        self.flush_rows = flush_rows
        self.flush_s = flush_s
        self._last_flush = time.monotonic()
        self._rows: list[dict[str, Any]] = []
        self._parts = itertools.count(_next_part(self.folder, self.prefix))
        self.rows_written = 0
        self.on_row = on_row  # told of every row appended (progress)

    def append(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if self.on_row is not None:
            self.on_row(row)
        if len(self._rows) >= self.flush_rows or time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows, schema=self.schema)
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        atomic_write_bytes(self.folder / f"{self.prefix}-{next(self._parts):05d}.parquet", sink.getvalue())
        self.rows_written += len(self._rows)
        self._rows.clear()

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # flush also on error and Ctrl-C: what was received is kept


def read_table(paths: RunPaths, table: str, columns: list[str] | None = None) -> pa.Table:
    folder = paths.table(table)
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))
    if not files:
        if not paths.root.is_dir():
            raise RecordError(f"no run directory at {paths.root}: pass the folder that holds data/")
        return SCHEMAS[table].empty_table().select(columns) if columns else SCHEMAS[table].empty_table()
    try:
        parts = [pq.read_table(f, columns=columns, schema=SCHEMAS[table]) for f in files]
    except (OSError, pa.ArrowInvalid) as exc:
        raise RecordError(f"cannot read {table} in {folder}: {exc}. Is this a run directory?") from exc
    return pa.concat_tables(parts)


def iter_batches(paths: RunPaths, table: str, columns: list[str], batch_rows: int = 4096
                 ) -> Iterator[pa.RecordBatch]:
    """Stream a table in file order (the order it was written), reading only `columns`."""
    schema = SCHEMAS[table]
    for path in sorted(p for p in paths.table(table).glob("*.parquet") if not p.name.startswith(".")):
        try:
            handle = pq.ParquetFile(path)
            present = set(handle.schema_arrow.names)
            for batch in handle.iter_batches(batch_size=batch_rows, columns=[c for c in columns if c in present]):
                # Older parts may lack newer columns: add them as nulls so callers see one shape.
                arrays = [batch.column(c) if c in present else pa.nulls(batch.num_rows, schema.field(c).type)
                          for c in columns]
                yield pa.RecordBatch.from_arrays(arrays, names=columns)
        except (OSError, pa.ArrowInvalid) as exc:
            raise RecordError(f"cannot read {path}: {exc}") from exc


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _next_part(folder: Path, prefix: str) -> int:
    """Continue numbering after existing parts so a resumed writer never overwrites one."""
    existing = [int(p.stem.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}-*.parquet")
                if p.stem.rsplit("-", 1)[1].isdigit()]
    return max(existing, default=-1) + 1
