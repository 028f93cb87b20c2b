"""Filtered reads of a table: the rows whose columns hold given values (a run's digests run to megabytes per
request: read only the wanted ones), and the rows of given request ids by the parts' row-group statistics. Like
every read of Parquet, here in `record/` (tests/unit/test_recorded.py checks no module outside opens a part)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orchestrator.errors import RecordError
from orchestrator.record.schemas import SCHEMAS
from orchestrator.record.tables import damaged

Footers = dict[Path, pq.FileMetaData]  # each part's footer, read once (tables.iter_batches fills it)


def read_where(parts: Footers, table: str, columns: list[str], where: Mapping[str, Any]) -> pa.Table:
    """The rows whose every column in `where` holds its value (a list: one of its values), of the table's `parts`
    (their footers as read already: record/tables.py footers_of; older parts lack newer columns: nulls).
    pyarrow.dataset, imported here alone: it imports pandas."""
    import pyarrow.dataset as ds

    files = [str(p) for p in parts]
    if not files:
        return pa.table({c: pa.array([], pa.null()) for c in columns})
    tests = [ds.field(c).isin(v) if isinstance(v, list) else ds.field(c) == v for c, v in where.items()]
    condition = tests[0]
    for test in tests[1:]:
        condition = condition & test
    try:
        return ds.dataset(files, schema=SCHEMAS.get(table), format="parquet").to_table(columns=columns,
                                                                                       filter=condition)
    except (OSError, pa.ArrowInvalid) as exc:
        raise RecordError(f"cannot read {table} in {Path(files[0]).parent} ({exc}): the run dir is damaged; copy "
                          "it again from its source") from exc


def rows_by_id(parts: Footers, ids: list[str], columns: list[str]) -> list[dict[str, Any]]:
    """The `columns` of the responses whose request id is in `ids` (sorted), every attempt, in part order, of the
    `parts` (their footers as read already: record/tables.py footers_of). Only row groups whose request-id
    statistics admit one of them are read, and a part without one is not opened: cheaper than a pyarrow dataset
    scan of every part, which cost about twice as much on the benchmark's record (docs/benchmarks.md)."""
    out = []
    for path, footer in parts.items():
        try:
            out += _wanted_rows(path, footer, ids, columns)
        except (OSError, pa.ArrowInvalid) as exc:
            raise damaged(path, exc) from exc
    return out


def _wanted_rows(path: Path, footer: pq.FileMetaData, ids: list[str], columns: list[str]) -> list[dict[str, Any]]:
    leaf = next((i for i in range(footer.num_columns) if footer.schema.column(i).path == "request_id"), None)
    groups = []
    for group in range(footer.num_row_groups if leaf is not None else 0):
        stats = footer.row_group(group).column(leaf).statistics
        if stats is not None and stats.has_min_max:
            at = bisect.bisect_left(ids, stats.min)
            if at == len(ids) or ids[at] > stats.max:
                continue
        elif stats is not None and stats.has_null_count and stats.null_count == footer.row_group(group).num_rows:
            continue
        groups.append(group)
    if not groups:
        return []
    handle = pq.ParquetFile(path, metadata=footer)
    present = handle.schema_arrow.names
    read = handle.read_row_groups(groups, columns=[c for c in columns if c in present])
    read = read.filter(pc.is_in(read.column("request_id"), value_set=pa.array(ids, pa.string())))
    rows: list[dict[str, Any]] = pa.table(
        [read.column(c) if c in present else pa.nulls(read.num_rows, SCHEMAS["responses"].field(c).type)
         for c in columns], names=columns).to_pylist()
    return rows
