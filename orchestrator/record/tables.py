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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths, atomic_write_bytes

# 2: request_id, attempt, role (responses), attempt (arms); 3: probes' op columns, placement (arms); 4: probes'
# image_id; 5: load points (responses: scheduled_ns .. offered_rate_per_s, start; arms: start, model, memory peaks);
# 6: the digests table (per-module activation digests of flagged requests), arms' digests_note; 7: responses'
# error_kind, arms' engine (the one that answered); 8: responses' prefix_seen. Older parts read with nulls.
SCHEMA_VERSION = "8"

_TOP = pa.struct([("token", pa.string()), ("logprob", pa.float64())])
_PROMPT_TOP = pa.struct([("token_id", pa.int64()), ("token", pa.string()), ("logprob", pa.float64()),
                         ("rank", pa.int64())])

RESPONSES = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()),
    ("prompt_id", pa.string()), ("phase", pa.string()), ("phase_kind", pa.string()),
    ("batch_id", pa.int64()), ("repeat", pa.int64()), ("request_index", pa.int64()),
    ("cold", pa.bool_()),
    # arm/prompt/phase/batch/repeat: the same in a resumed run; `attempt` 0 first, +1 per re-send; `role`
    # cold (an arm's first request), measured, warmup. Cells use measured rows, latest attempt per request_id.
    ("request_id", pa.string()), ("attempt", pa.int64()), ("role", pa.string()),
    ("prompt_sha256", pa.string()), ("prompt_chars", pa.int64()), ("prompt_tokens", pa.int64()),
    ("request_json", pa.string()),
    ("response_body", pa.binary()),  # exactly the bytes received
    ("http_status", pa.int64()), ("error", pa.string()), ("error_kind", pa.string()),  # its kind: record/failures.py
    ("send_ns", pa.int64()), ("recv_ns", pa.int64()),
    ("batch_send_spread_ns", pa.int64()),  # concurrent: last send - first send of the batch
    ("batch_running_max", pa.int64()),  # concurrent: most running requests /metrics showed meanwhile
    # From servers that trace requests (the reference engine's `engine_trace`): when the request was complete
    # at the server (wall clock, ns) and the engine steps it ran in; per batch, the arrival spread there and
    # the most of the batch's requests that ran in one step. Null elsewhere (vLLM: /metrics above).
    ("server_arrival_ns", pa.int64()), ("server_first_step", pa.int64()), ("server_last_step", pa.int64()),
    ("batch_arrival_spread_ns", pa.int64()), ("batch_server_together", pa.int64()),
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
    # Load phases (run/load/generator.py): when the schedule meant it to be sent (its send_ns is when it was: the pacing
    # error), the answer's first byte, and streamed: its first token chunk and the gaps between token chunks.
    ("scheduled_ns", pa.int64()), ("first_byte_ns", pa.int64()), ("streamed", pa.bool_()),
    ("first_token_ns", pa.int64()), ("inter_token_ns", pa.list_(pa.int64())),
    ("load_point", pa.string()),  # the load point's label ("poisson 8/s, at most 16 at once"); null elsewhere
    ("offered_rate_per_s", pa.float64()),  # its rate; null: a closed loop
    ("start", pa.int64()),  # study.starts: which start of the arm (0: the one that runs the protocol)
    ("prefix_seen", pa.bool_()),  # a load window's: its prompt's start was sent before in the window; null elsewhere
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
    ("attempt", pa.int64()),  # 0, then +1 each time `run --resume` starts the arm again; readers take the latest
    ("started_during", pa.string()),  # runtime.overlap_arm_starts: the arm whose sequential phases it started in
    # study.parallel_arms (run/placement.py): the engine it was placed on ("local" or its URL), its wave (arms of
    # one wave ran at the same time), its GPUs by index and UUID, its cores; null when arms ran one by one.
    ("placed_host", pa.string()), ("wave", pa.int64()), ("gpu_indices", pa.list_(pa.int64())),
    ("gpu_uuids", pa.list_(pa.string())), ("cpuset", pa.string()),
    ("start", pa.int64()),  # study.starts: 0 runs the protocol, 1.. only start, answer and stop
    ("model", pa.string()), ("model_revision", pa.string()),  # served; a hub revision or a folder's content hash
    # Peaks while the arm ran, sampled: its container's or process tree's memory, its GPUs' memory (bytes);
    # null where not observable, with why in memory_note
    ("peak_memory_bytes", pa.int64()), ("peak_gpu_memory_bytes", pa.int64()), ("memory_note", pa.string()),
    ("digests_note", pa.string()),  # flagged requests whose digests could not be fetched (null: none, or all were)
    ("engine", pa.string()),  # the engine that answered (a stand-in's: the reference engine); null before schema 7
])

# One row per kernel-probe cell (orchestrator/probes/gemm.py; docs/probes.md says what each column means).
PROBES = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("process", pa.int64()), ("image", pa.string()),
    ("image_id", pa.string()),  # what ran, as the arms table's image_id names an arm's: attribution matches on it
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
    # ops probes (orchestrator/probes/ops.py): context tokens, the harness's controls, the preset's expectation
    ("context", pa.int64()), ("control", pa.string()), ("expect_invariant", pa.bool_()), ("params", pa.string()),
])

# One row per (flagged request, engine step, leaf-module call): the engine's digest of the request's own rows
# (run/send/digests.py fetches them; docs/record.md says what each column means).
DIGESTS = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()),
    ("request_id", pa.string()), ("attempt", pa.int64()),  # the request's, as in responses
    ("engine_request_id", pa.string()),  # the answer's id (cmpl-...), as the engine's batches name it
    ("step", pa.int64()),  # 0: the prefill; k: the forward that produced token k + 1
    ("call", pa.int64()),  # the leaf-module call's index within the step, in forward order
    ("module", pa.string()), ("module_type", pa.string()),
    # the request's rows in the output's (flattened) leading dimension, and all of the batch's (a GEMM's M)
    ("rows_start", pa.int64()), ("rows_stop", pa.int64()), ("rows_total", pa.int64()),
    ("in_shape", pa.list_(pa.int64())), ("out_shape", pa.list_(pa.int64())),
    ("in_hash", pa.string()), ("in_sum", pa.float64()), ("in_absmax", pa.float64()),
    ("out_hash", pa.string()), ("out_sum", pa.float64()), ("out_absmax", pa.float64()),
    ("out_norm", pa.float64()), ("out_head", pa.list_(pa.float64())),
    # the step's batch: its size, the engine ids of its requests, the target request's context tokens
    ("batch_size", pa.int64()), ("batch_request_ids", pa.list_(pa.string())), ("context_tokens", pa.int64()),
])

SCHEMAS = {"responses": RESPONSES, "logs": LOGS, "arms": ARMS, "probes": PROBES, "digests": DIGESTS}


def _with_metadata(name: str) -> pa.Schema:
    return SCHEMAS[name].with_metadata({"orchestrator.schema_version": SCHEMA_VERSION, "orchestrator.table": name})


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
        self.extend([row])

    def extend(self, rows: list[dict[str, Any]]) -> None:
        """Rows that go into one part together: added in one step, so Ctrl-C leaves all of them or none."""
        self._rows.extend(rows)
        self._tell(rows)
        if len(self._rows) >= self.flush_rows or time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        rows, self._rows = self._rows, []  # taken first: a stop during the write loses them (a resume sends
        if rows:  # them again) rather than writing them twice
            self._write(rows)

    def append_whole(self, rows: list[dict[str, Any]]) -> None:
        """Rows that are one unit (a load window), in a part of their own: a kill -9 leaves all or none."""
        self.flush()
        self._write(rows)
        self._tell(rows)

    def _tell(self, rows: list[dict[str, Any]]) -> None:
        if self.on_row is not None:
            for row in rows:
                self.on_row(row)

    def _write(self, rows: list[dict[str, Any]]) -> None:
        table = pa.Table.from_pylist(rows, schema=self.schema)
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        atomic_write_bytes(self.folder / f"{self.prefix}-{next(self._parts):05d}.parquet", sink.getvalue())
        self.rows_written += len(rows)

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # flush also on error and Ctrl-C: what was received is kept


def read_table(paths: RunPaths, table: str, columns: list[str] | None = None) -> pa.Table:
    files = part_files(paths, table)
    if not files:
        if not paths.root.is_dir():
            raise RecordError(f"no run directory at {paths.root}: pass the folder that holds data/")
        return SCHEMAS[table].empty_table().select(columns) if columns else SCHEMAS[table].empty_table()
    key = LATEST_KEY.get(table, ())
    wanted = None if columns is None else list(dict.fromkeys([*columns, *key, *(("attempt",) if key else ())]))
    for path in files:
        _check_version(path, _footer(path))
    try:
        parts = [pq.read_table(f, columns=wanted, schema=SCHEMAS[table]) for f in files]
    except (OSError, pa.ArrowInvalid) as exc:
        raise damaged(paths.table(table), exc) from exc
    whole = pa.concat_tables(parts)
    if key and pc.max(whole.column("attempt")).as_py():  # something was re-sent: keep the latest attempts
        keys = [k if k[0] is not None else None for k in zip(*(whole.column(c).to_pylist() for c in key), strict=True)]
        latest = _latest_attempts(keys, whole.column("attempt").to_pylist())
        if latest is not None:
            whole = whole.filter(pa.array(_is_latest(keys, whole.column("attempt").to_pylist(), latest)))
    return whole if columns is None else whole.select(columns)


# What a re-send (`run --resume`) supersedes: the rows of a key but its latest attempt; an arm's, per start.
LATEST_KEY = {"responses": ("request_id",), "arms": ("arm", "start"), "digests": ("request_id",)}


def _latest_attempts(keys: list[Any], attempts: list[int | None]) -> dict[Any, int] | None:
    """Key -> its latest attempt; None when nothing was ever re-sent (the common case: no filtering)."""
    if not any(attempts):
        return None
    latest: dict[Any, int] = {}
    for key, attempt in zip(keys, attempts, strict=True):
        if key is not None:
            latest[key] = max(latest.get(key, 0), attempt or 0)
    return latest


def _is_latest(keys: list[Any], attempts: list[int | None], latest: dict[Any, int]) -> list[bool]:
    """`latest` may hold the re-sent keys only: any other key was sent once, at attempt 0."""
    return [key is None or (attempt or 0) == latest.get(key, 0) for key, attempt in zip(keys, attempts, strict=True)]


def iter_batches(paths: RunPaths, table: str, columns: list[str], batch_rows: int = 4096,
                 dictionary: tuple[str, ...] = (), stand_in: dict[str, str] | None = None,
                 footers: dict[Path, pq.FileMetaData] | None = None) -> Iterator[pa.RecordBatch]:
    """Stream a table in file order (the order it was written), reading only `columns`; rows a later attempt
    superseded (`run --resume`) are left out. String columns named in `dictionary` come dictionary-encoded
    (strings, or their list values): Parquet stores them so, and decoding only the indices is several times
    cheaper than building every string. `stand_in` maps a column to the one it stands in for (tokens ->
    token_ids): it is read only in row groups where that one has a null row, and comes as nulls elsewhere.
    `footers` receives each part's footer (read and checked once), for a later read of the same parts (the
    explorer's representatives) to choose its parts and row groups by, without reading them again."""
    schema, stand_in = SCHEMAS[table], stand_in or {}
    [key] = LATEST_KEY.get(table, (None,))  # a table streamed has a key of one column
    parts = part_files(paths, table)
    footers = {} if footers is None else footers  # read once: the resent check, the read and the caller share them
    footers.update({path: _footer(path) for path in parts if path not in footers})
    for path, footer in footers.items():
        _check_version(path, footer)
    latest = _resent(footers, key) if key else None
    wanted = list(dict.fromkeys([*columns, *((key, "attempt") if latest is not None and key else ())]))
    types = {c: _dictionary_type(schema.field(c).type) if c in dictionary else schema.field(c).type for c in wanted}
    for path in parts:
        footer = footers[path]
        try:
            handle = pq.ParquetFile(path, metadata=footer, read_dictionary=[
                leaf.path for leaf in footer.schema if leaf.path.split(".")[0] in dictionary])
            present = set(handle.schema_arrow.names)
            direct = [c for c in wanted if c in present and c not in stand_in]
            spares = [c for c in wanted if c in present and c in stand_in]
            for group in range(footer.num_row_groups):
                spare, offset = None, 0
                for batch in handle.iter_batches(batch_size=batch_rows, row_groups=[group], columns=direct):
                    arrays = []
                    for c in wanted:  # older parts may lack newer columns: nulls, so callers see one shape
                        array = batch.column(c) if c in direct else pa.nulls(batch.num_rows, types[c])
                        if c in spares and (stand_in[c] not in direct or batch.column(stand_in[c]).null_count):
                            if spare is None:
                                spare = handle.read_row_group(group, columns=spares)
                            array = spare.column(c).slice(offset, batch.num_rows).combine_chunks()
                        arrays.append(array.cast(types[c]) if c in dictionary else array)
                    offset += batch.num_rows
                    out = pa.RecordBatch.from_arrays(arrays, names=wanted)
                    if latest is not None and key:
                        out = out.filter(pa.array(_is_latest(out.column(key).to_pylist(),
                                                             out.column("attempt").to_pylist(), latest)))
                    yield out.select(columns)
        except (OSError, pa.ArrowInvalid) as exc:
            raise damaged(path, exc) from exc


def footers_of(paths: RunPaths, table: str) -> dict[Path, pq.FileMetaData]:
    """Each part's footer, in the order iter_batches reads the parts (pass them on to it: read once)."""
    return {path: _footer(path) for path in part_files(paths, table)}


def part_files(paths: RunPaths, table: str) -> list[Path]:
    """A table's part files in the order they were written, temporary ones left out."""
    return sorted(p for p in paths.table(table).glob("*.parquet") if not p.name.startswith("."))


def damaged(path: Path, exc: Exception) -> RecordError:
    return RecordError(f"cannot read {path} ({exc}): the run dir is damaged; copy it again from its source")


def _check_version(path: Path, footer: pq.FileMetaData) -> None:
    """Older parts read with nulls for newer columns; a newer part may have changed what a column means."""
    written = (footer.metadata or {}).get(b"orchestrator.schema_version", b"1").decode()
    if not written.isdigit() or int(written) > int(SCHEMA_VERSION):
        raise RecordError(f"{path} was written with record schema {written}, this orchestrator reads schemas 1 to "
                          f"{SCHEMA_VERSION}: read it with the orchestrator version that wrote it, or upgrade")


def _footer(path: Path) -> pq.FileMetaData:
    try:
        return pq.read_metadata(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise damaged(path, exc) from exc


def _resent(footers: dict[Path, pq.FileMetaData], key: str) -> dict[str, int] | None:
    """Key -> latest attempt of the keys sent more than once (None: nothing was), streamed: a part whose
    footer shows no attempt above 0 is not read, so memory holds the re-sent rows, not the record's."""
    latest: dict[str, int] = {}
    for path, footer in footers.items():
        if _most_attempts(footer) == 0:
            continue
        try:
            for batch in pq.ParquetFile(path, metadata=footer).iter_batches(columns=[key, "attempt"]):
                resent = batch.filter(pc.fill_null(pc.greater(batch.column("attempt"), 0), False))
                for name, attempt in zip(*(resent.column(c).to_pylist() for c in (key, "attempt")), strict=True):
                    if name is not None:
                        latest[name] = max(latest.get(name, 0), attempt)
        except (OSError, pa.ArrowInvalid) as exc:
            raise damaged(path, exc) from exc
    return latest or None


def interleaves(footer: pq.FileMetaData) -> bool:
    """Whether a responses part may hold a cell's rows apart from its others: one `run --resume` wrote, or a load
    window's (every cell's probes in it). By the row groups' statistics; where they do not say, it may."""
    attempts = _most_attempts(footer)
    return attempts is None or attempts > 0 or any(
        stats is None or not stats.has_null_count or stats.null_count < values
        for stats, values in _statistics(footer, "load_point"))


def _most_attempts(footer: pq.FileMetaData) -> int | None:
    """The largest `attempt` of a part by its row groups' statistics: 0 where it lacks the column or all
    its values are null, None where statistics do not say."""
    most = 0
    for stats, values in _statistics(footer, "attempt"):
        if stats is not None and stats.has_null_count and stats.null_count == values:
            continue
        if stats is None or not stats.has_min_max:
            return None
        most = max(most, int(stats.max))
    return most


def _statistics(footer: pq.FileMetaData, column: str) -> Iterator[tuple[Any, int]]:
    """A column's statistics and value count in each row group of a part; none where the part lacks it."""
    leaves = [footer.schema.column(i).path for i in range(footer.num_columns)]
    if column in leaves:
        for group in range(footer.num_row_groups):
            chunk = footer.row_group(group).column(leaves.index(column))
            yield chunk.statistics, chunk.num_values


def _dictionary_type(kind: pa.DataType) -> pa.DataType:
    """string -> dictionary<int32, string>; list<string> -> list<dictionary<int32, string>>."""
    if pa.types.is_list(kind):
        return pa.list_(_dictionary_type(kind.value_type))
    if pa.types.is_string(kind):
        return pa.dictionary(pa.int32(), pa.string())
    raise ValueError(f"{kind} cannot be read dictionary-encoded: only strings and lists of strings")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _next_part(folder: Path, prefix: str) -> int:
    """Continue numbering after existing parts so a resumed writer never overwrites one."""
    existing = [int(p.stem.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}-*.parquet")
                if p.stem.rsplit("-", 1)[1].isdigit()]
    return max(existing, default=-1) + 1
