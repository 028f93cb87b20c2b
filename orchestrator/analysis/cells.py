"""The responses record cut into cells, streamed: a cell is (arm, prompt_id, phase) over the `measured` requests of
an arm's first start; an arm's `cold` first request is handed on apart, `warmup` and `background` requests and a
later start's are in no cell (docs/conventions.md). A first run's sequential and concurrent phases land each cell's
measured rows together, so memory holds one cell at a time. Two kinds of part interleave cells (record/tables.py
`interleaves`): a load phase's windows, each written whole as it ends with every cell's probes in it, and what
`run --resume` sent again, after the rows it completes. Where the footers show either, the cell keys are read
first (the run's ledger, record/ledger.py: the pass streams the lists beside it), and a cell whose rows lie apart
is held until its last row, then handed on in the order it was planned. Each run's responses are read through its
`reads`, once for every reader of the run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis import batches, explorer
from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Recorded, of
from orchestrator.record.tables import interleaves

KEY = ("arm", "prompt_id", "phase")
Key = tuple[str, str, str]  # a cell: arm, prompt_id, phase
COLUMNS = ["arm", "prompt_id", "phase", "phase_kind", "batch_id", "cold", "role", "error", "completion_text",
           "sig_text", "sig_top_logprobs", "sig_token_ids", "token_ids", "tokens", "token_logprobs",
           "top_gaps", "top_logprobs_entries", "prompt_logprobs", "start", *batches.COLUMNS[3:], *explorer.COLUMNS]
# The token strings are compared only for equality, and only where a server returned no token ids
# (positions.token_codes): read dictionary-encoded, and only in row groups where token_ids has a null.
DICTIONARY = ("tokens",)
STAND_IN = {"tokens": "token_ids"}
TEXTS = "completion_text"  # read only when a prompt has an expectation on it (quality)


Sources = Recorded | RunPaths | list[RunPaths]  # the runs compared, or run dirs to read so (record/recorded.py of)


def responses(sources: Sources, texts: bool = True, batch_rows: int = 4096,
              columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The responses as the comparison reads them (COLUMNS, or `columns`; the completion texts as nulls unless
    `texts`), each run's as its `reads` keep them (record/ledger.py: read once); several runs' arms labelled."""
    columns = [c for c in columns or COLUMNS if texts or c != TEXTS]
    for run in of(sources).runs:
        for batch in run.reads.responses(columns, batch_rows, DICTIONARY, STAND_IN):
            if not texts:
                batch = batch.append_column(TEXTS, pa.nulls(batch.num_rows, pa.string()))
            if run.label:
                arms = pc.binary_join_element_wise(run.label, batch.column("arm"), "")
                batch = batch.set_column(batch.schema.get_field_index("arm"), "arm", arms)
            yield batch


def _measured(batch: pa.RecordBatch) -> pa.Array:
    """Rows of role `measured` of an arm's first start; a record without roles (schema 1) marks only its cold rows.
    A later start's requests (study.starts, start > 0; a null start is 0) are in no cell: analysis/starts.py."""
    roles = batch.column("role")
    if not roles.null_count:  # every row has a role: one kernel, not five
        measured = pc.equal(roles, "measured")
    elif roles.null_count == len(roles):  # schema 1: no row has one
        measured = pc.invert(pc.fill_null(batch.column("cold"), False))
    else:
        measured = pc.if_else(pc.is_null(batch.column("role")), pc.invert(pc.fill_null(batch.column("cold"), False)),
                              pc.equal(batch.column("role"), "measured"))
    start = batch.column("start")
    if start.null_count == len(start):  # a record from before study.starts, or one start
        return measured
    return pc.and_(measured, pc.invert(pc.fill_null(pc.greater(start, 0), False)))


class Cut(NamedTuple):
    """A cell's measured rows, and whether one of them is of a concurrent phase (found once per record batch, not
    once per cell: analysis/batches.py has batches to check only then)."""

    key: Key
    rows: pa.Table
    concurrent: bool


def iter_cells(sources: Sources, batch_rows: int = 4096, cold: list[pa.Table] | None = None,
               texts: bool = True) -> Iterator[Cut]:
    """Each cell's measured rows; the cold rows go to `cold`, warm-up rows nowhere."""
    recorded = of(sources)
    parts = [footer for run in recorded.runs for footer in run.reads.parts("responses").values()]
    apart = _apart(recorded, batch_rows) if any(map(interleaves, parts)) else {}
    rank = {key: i for i, key in enumerate(apart)}  # the order cells first appear in
    current: Key | None = None
    buffer: list[pa.RecordBatch] = []  # the cell's slices of record batches: one table made of them at its end
    done: set[Key] = set()
    concurrent = False
    held: dict[Key, tuple[list[pa.RecordBatch], list[bool]]] = {}  # a cell whose rows lie apart: its slices so far
    for batch in responses(recorded, texts, batch_rows):
        measured = _measured(batch).to_numpy(zero_copy_only=False)
        kinds = pc.equal(batch.column("phase_kind"), "concurrent")
        kinds = (pc.fill_null(kinds, False) if kinds.null_count else kinds).to_numpy(zero_copy_only=False)
        if cold is not None and not measured.all():
            at = np.flatnonzero(pc.fill_null(batch.column("cold"), False).to_numpy(zero_copy_only=False))
            cold.append(pa.Table.from_batches([batch.take(at)]))
        bounds = _runs(batch, measured)  # measured rows are sliced out, not filtered: a filter copies the lists
        keys = _keys(batch, bounds[:-1])
        complete: list[Key] = []
        for key, start, stop in zip(keys, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            if not measured[start]:
                continue
            if key != current and current is not None:
                yield Cut(current, pa.Table.from_batches(buffer), concurrent)
                done.add(current)
                current = None
            if key in apart:
                slices, flags = held.setdefault(key, ([], []))
                slices.append(batch.slice(start, stop - start))
                flags.append(bool(kinds[start:stop].any()))
                apart[key] -= stop - start
                if not apart[key]:
                    complete.append(key)
                continue
            if key != current:
                if key in done:
                    raise RecordError(f"rows of cell {key} are not contiguous in the responses record; "
                                      "was the folder merged by hand?")
                current, buffer, concurrent = key, [], False
            buffer.append(batch.slice(start, stop - start))
            concurrent = concurrent or bool(kinds[start:stop].any())
        for key in sorted(complete, key=rank.__getitem__):
            slices, flags = held.pop(key)
            yield Cut(key, _planned(pa.Table.from_batches(slices)), any(flags))
    if current is not None:
        yield Cut(current, pa.Table.from_batches(buffer), concurrent)


def _apart(recorded: Recorded, batch_rows: int) -> dict[Key, int]:
    """The cells whose measured rows lie in more than one run of the record, each with its count of them: from
    the key columns alone, before the cells are cut (of the ledger, read first: the pass streams beside it)."""
    for run in recorded.runs:
        run.reads.ledger()
    runs: dict[Key, int] = {}  # in the order cells first appear
    rows: dict[Key, int] = {}
    last: Key | None = None
    for batch in responses(recorded, True, batch_rows, [*KEY, "role", "cold", "start"]):
        measured = _measured(batch).to_numpy(zero_copy_only=False)
        bounds = _runs(batch, measured)
        for key, start, stop in zip(_keys(batch, bounds[:-1]), bounds[:-1].tolist(), bounds[1:].tolist(),
                                    strict=True):
            if measured[start]:
                runs[key] = runs.get(key, 0) + (key != last)
                rows[key] = rows.get(key, 0) + stop - start
                last = key
    return {key: rows[key] for key, count in runs.items() if count > 1}


def _planned(rows: pa.Table) -> pa.Table:
    """A cell gathered from runs apart, in the order the protocol sends its requests (batch, then repeat: the
    order of a run that was not interrupted), whatever order its parts were written in."""
    return rows.take(pc.sort_indices(rows, [("batch_id", "ascending"), ("repeat", "ascending")]))


def _keys(batch: pa.RecordBatch, starts: np.ndarray) -> list[Key]:
    """The cell key of each run's first row: read one by one where runs are few (cells of measured requests),
    taken as columns where they are many (a load phase's probes among background requests)."""
    if len(starts) > 16:
        return list(zip(*(batch.column(k).take(starts).to_pylist() for k in KEY), strict=True))
    columns = [batch.column(k) for k in KEY]
    return [(columns[0][i].as_py(), columns[1][i].as_py(), columns[2][i].as_py()) for i in starts.tolist()]


def _runs(batch: pa.RecordBatch, measured: np.ndarray) -> np.ndarray:
    """The rows where each run of one key, measured or not, starts, then the batch's length. Found by arrow
    compute so that only the keys of each run's first row become Python objects, not every row's."""
    rows = batch.num_rows
    if not rows:
        return np.zeros(1, dtype=np.int64)
    changed = measured[1:] != measured[:-1]
    for name in KEY:
        column = batch.column(name)
        a, b = column.slice(1), column.slice(0, rows - 1)
        if not column.null_count:  # the usual case: one kernel, not five
            changed |= pc.not_equal(a, b).to_numpy(zero_copy_only=False)
            continue
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        changed |= ~same.to_numpy(zero_copy_only=False)
    return np.concatenate([[0], np.nonzero(changed)[0] + 1, [rows]])
