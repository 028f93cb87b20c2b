"""The Parquet record: streaming writers with atomic part files, readers (the schemas: record/schemas.py).

One dataset (a folder of part files) per table under RUN/data/. Rows are buffered briefly and
flushed to a new part file (temporary name, then rename), so a crash keeps every flushed part and
readers never see a half-written file. pandas, polars and duckdb read each folder directly.
"""

from __future__ import annotations

import hashlib
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
from orchestrator.record.schemas import SCHEMA_VERSION, SCHEMAS


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


def read_table(paths: RunPaths, table: str, columns: list[str] | None = None,
               footers: dict[Path, pq.FileMetaData] | None = None, every_attempt: bool = False) -> pa.Table:
    """The table's `columns` (None: all), in the order written, the rows of latest attempts (`every_attempt`: every
    row); `footers`: its parts' footers as read already (footers_of), else read here."""
    footers = footers_of(paths, table) if footers is None else footers
    if not footers:
        if not paths.root.is_dir():
            raise RecordError(f"no run directory at {paths.root}: pass the folder that holds data/")
        return SCHEMAS[table].empty_table().select(columns) if columns else SCHEMAS[table].empty_table()
    key = () if every_attempt else LATEST_KEY.get(table, ())
    wanted = list(dict.fromkeys([*(columns or SCHEMAS[table].names), *key, *(("attempt",) if key else ())]))
    schema = pa.schema([SCHEMAS[table].field(c) for c in wanted])
    parts = []
    for path, footer in footers.items():
        _check_version(path, footer)
        try:
            parts.append(_read_part(path, footer, schema))
        except (OSError, pa.ArrowInvalid) as exc:
            raise damaged(path, exc) from exc
    whole = pa.concat_tables(parts)
    keep = latest_rows(whole, key) if key else None
    whole = whole if keep is None else whole.filter(keep)
    return whole if columns is None else whole.select(columns)


def _read_part(path: Path, footer: pq.FileMetaData, schema: pa.Schema) -> pa.Table:
    """A part's columns of `schema`; a column an older part lacks comes as nulls."""
    handle = pq.ParquetFile(path, metadata=footer)
    present = set(handle.schema_arrow.names)
    read = handle.read(columns=[c for c in schema.names if c in present])
    columns = [read.column(c) if c in present else pa.nulls(read.num_rows, field.type)
               for c, field in zip(schema.names, schema, strict=True)]
    return pa.Table.from_arrays([c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, schema,
                                                                                        strict=True)], schema=schema)


def latest_rows(rows: pa.Table, key: tuple[str, ...]) -> pa.Array | None:
    """Which rows are of their key's latest attempt (a mask); None when nothing was re-sent (keep every row)."""
    if not rows.num_rows or not pc.max(rows.column("attempt")).as_py():
        return None
    keys = [k if k[0] is not None else None for k in zip(*(rows.column(c).to_pylist() for c in key), strict=True)]
    latest = _latest_attempts(keys, rows.column("attempt").to_pylist())
    return None if latest is None else pa.array(_is_latest(keys, rows.column("attempt").to_pylist(), latest))


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
                 footers: dict[Path, pq.FileMetaData] | None = None, every_attempt: bool = False
                 ) -> Iterator[pa.RecordBatch]:
    """Stream a table in file order (the order it was written), reading only `columns`; rows a later attempt
    superseded (`run --resume`) are left out. String columns named in `dictionary` come dictionary-encoded
    (strings, or their list values): Parquet stores them so, and decoding only the indices is several times
    cheaper than building every string. `stand_in` maps a column to the one it stands in for (tokens ->
    token_ids): it is read only in row groups where that one has a null row, and comes as nulls elsewhere.
    `footers`: the parts' footers as read already (footers_of): those parts are read; else (None or empty) the
    table's are listed and their footers put there, for a later read of the same parts (the explorer's
    representatives) to choose its parts and row groups by, without reading them again. `every_attempt`: no row
    left out (the caller keeps the latest: record/ledger.py)."""
    schema, stand_in = SCHEMAS[table], stand_in or {}
    [key] = (None,) if every_attempt else LATEST_KEY.get(table, (None,))  # a table streamed has a key of one column
    footers = {} if footers is None else footers  # read once: the resent check, the read and the caller share them
    if not footers:
        footers.update(footers_of(paths, table))
    parts = list(footers)
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
    """A file-name-safe prefix, one per name: where a character had to be replaced, a hash of the name follows,
    so arms `a.b` and `a_b` never write (and number) the same part files."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    return safe if safe == name else f"{safe}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _next_part(folder: Path, prefix: str) -> int:
    """Continue numbering after existing parts so a resumed writer never overwrites one."""
    existing = [int(p.stem.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}-*.parquet")
                if p.stem.rsplit("-", 1)[1].isdigit()]
    return max(existing, default=-1) + 1
