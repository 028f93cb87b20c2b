"""A run dir's tables, each read once for every reader of the run (`RecordedRun.reads`, record/recorded.py): a
table's parts listed and their footers read once; a small table (arms, probes, logs) read whole once; the responses'
per-request columns (the ledger: ids, roles, errors, times, signatures) once, and their per-token lists and texts
(STREAMED) once, streamed in the order written. The comparison's pass streams what it reads and holds one cell at a
time; where the run's other readers will take the ledger after it (`gather`: the report), the pass reads the
ledger's columns too and keeps them, so no column is read twice. Where the pass must know the cells apart before it
starts (record/tables.py interleaves), the ledger is read first and the pass streams the lists beside it.
tests/unit/test_recorded.py counts the reads of a `compare`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from orchestrator.record.paths import RunPaths
from orchestrator.record.reads import Footers
from orchestrator.record.schemas import RESPONSES
from orchestrator.record.tables import LATEST_KEY, footers_of, iter_batches, latest_rows, read_table

# A response's per-token lists, texts and bodies: streamed, never held whole.
STREAMED = ("request_json", "response_body", "completion_text", "token_ids", "tokens", "token_logprobs",
            "top_logprobs", "top_gaps", "top_logprobs_entries", "prompt_logprobs")
UNREAD = ("study", "run_id", "prompt_sha256", "prompt_chars", "server_arrival_ns", "finish_reason",
          "sig_logprob_vector", "first_byte_ns")  # for the record's users' tools; no reader here takes them
LEDGER = [name for name in RESPONSES.names if name not in STREAMED and name not in UNREAD]


@dataclass
class Reads:
    """What has been read of one run dir, kept for its next reader (a comparison's labelled copy shares it)."""

    paths: RunPaths
    footers: dict[str, Footers] = field(default_factory=dict)  # table -> its parts' footers, in the order written
    tables: dict[str, pa.Table] = field(default_factory=dict)  # a small table whole, latest attempts
    every: tuple[pa.Table, pa.Array | None] | None = None  # the ledger read whole, every attempt; the latest rows
    latest: pa.Table | None = None  # the ledger, latest attempts
    gathering: bool = False  # the next pass over the responses keeps the ledger's columns (`gather`)

    def parts(self, table: str) -> Footers:
        """The table's parts (their footers), listed and read once."""
        if table not in self.footers:
            self.footers[table] = footers_of(self.paths, table)
        return self.footers[table]

    def table(self, name: str) -> pa.Table:
        """A small table (arms, probes, logs) whole, latest attempts."""
        if name not in self.tables:
            self.tables[name] = read_table(self.paths, name, footers=self.parts(name))
        return self.tables[name]

    def gather(self) -> None:
        """The ledger will be read after the next pass over the responses: that pass reads its columns too."""
        self.gathering = self.latest is None

    def ledger(self) -> pa.Table:
        """The responses' LEDGER columns, latest attempts, in the order written."""
        if self.latest is None:
            every, keep = self._every()
            self.latest = every if keep is None else every.filter(keep)
        return self.latest

    def _every(self) -> tuple[pa.Table, pa.Array | None]:
        if self.every is None:
            every = read_table(self.paths, "responses", LEDGER, self.parts("responses"), every_attempt=True)
            self.every = (every, latest_rows(every, LATEST_KEY["responses"]))
        return self.every

    def responses(self, columns: list[str], batch_rows: int = 4096, dictionary: tuple[str, ...] = (),
                  stand_in: dict[str, str] | None = None) -> Iterator[pa.RecordBatch]:
        """The responses' `columns`, latest attempts, in batches in the order written (`dictionary`, `stand_in`: as
        record/tables.py iter_batches): the ledger's from memory where it is read, else from the parts."""
        streamed = [c for c in columns if c not in LEDGER]
        if not streamed and (self.latest is not None or self.every is not None):
            yield from self.ledger().select(columns).to_batches(max_chunksize=batch_rows)
        elif self.every is not None:
            yield from self._beside(self.every, columns, streamed, batch_rows, dictionary, stand_in)
        else:
            yield from self._pass(columns, batch_rows, dictionary, stand_in)

    def _pass(self, columns: list[str], batch_rows: int, dictionary: tuple[str, ...],
              stand_in: dict[str, str] | None) -> Iterator[pa.RecordBatch]:
        """One pass over the parts; gathering, with the ledger's columns, kept once the pass is over."""
        gathering, self.gathering = self.gathering, False
        read = list(dict.fromkeys([*columns, *(LEDGER if gathering else [])]))
        kept: list[pa.RecordBatch] = []
        for batch in iter_batches(self.paths, "responses", read, batch_rows, dictionary, stand_in,
                                  self.parts("responses")):
            if gathering:
                kept.append(batch.select(LEDGER))
            yield batch.select(columns) if gathering else batch
        if gathering:
            self.latest = pa.Table.from_batches(kept, schema=pa.schema([RESPONSES.field(c) for c in LEDGER]))

    def _beside(self, ledger: tuple[pa.Table, pa.Array | None], columns: list[str], streamed: list[str],
                batch_rows: int, dictionary: tuple[str, ...], stand_in: dict[str, str] | None
                ) -> Iterator[pa.RecordBatch]:
        """The `streamed` columns read from the parts, every attempt, beside the ledger's rows (the same rows in the
        same order), then the latest attempts kept."""
        every, keep = ledger
        offset = 0
        for batch in iter_batches(self.paths, "responses", streamed, batch_rows, dictionary, stand_in,
                                  self.parts("responses"), every_attempt=True):
            rows = every.slice(offset, batch.num_rows)
            out = pa.RecordBatch.from_arrays([batch.column(c) if c in streamed else rows.column(c).combine_chunks()
                                              for c in columns], names=columns)
            yield out if keep is None else out.filter(keep.slice(offset, batch.num_rows))
            offset += batch.num_rows
