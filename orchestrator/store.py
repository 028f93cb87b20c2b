"""The Parquet record: explicit schemas, streaming writers with atomic part files, readers.

One dataset (a folder of part files) per table under RUN/data/. Rows are buffered briefly and
flushed to a new part file (temporary name, then rename), so a crash keeps every flushed part and
readers never see a half-written file. pandas, polars and duckdb read each folder directly.
"""

from __future__ import annotations

import io
import itertools
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.errors import RecordError
from orchestrator.paths import RunPaths, atomic_write_bytes

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
    ("completion_text", pa.string()), ("finish_reason", pa.string()), ("completion_tokens", pa.int64()),
    ("token_ids", pa.list_(pa.int64())), ("tokens", pa.list_(pa.string())),
    ("token_logprobs", pa.list_(pa.float64())),
    ("top_logprobs", pa.list_(pa.list_(_TOP))),
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

SCHEMAS = {"responses": RESPONSES, "logs": LOGS, "arms": ARMS}


def _with_metadata(name: str) -> pa.Schema:
    return SCHEMAS[name].with_metadata({"orchestrator.schema_version": SCHEMA_VERSION,
                                        "orchestrator.table": name})


class TableWriter:
    """Append rows; every `flush_rows` rows or `flush_s` seconds (and on close) they land as one atomic
    part file."""

    def __init__(self, paths: RunPaths, table: str, part_prefix: str, flush_rows: int = 256,
                 flush_s: float = 2.0) -> None:
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

    def append(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
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


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _next_part(folder: Path, prefix: str) -> int:
    """Continue numbering after existing parts so a resumed writer never overwrites one."""
    existing = [int(p.stem.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}-*.parquet")
                if p.stem.rsplit("-", 1)[1].isdigit()]
    return max(existing, default=-1) + 1
