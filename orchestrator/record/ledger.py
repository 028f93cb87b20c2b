"""A run dir's tables, each read once for every reader of the run (`RecordedRun.reads`, record/recorded.py): a
table's parts listed and their footers read once; the responses' per-request columns (the ledger: ids, roles,
errors, times, signatures) read whole once; their per-token lists and texts streamed once, in the order written,
beside the ledger's rows (what the comparison's cell pass reads; nothing else reads them whole); a small table
(arms, probes, logs) read whole once. tests/unit/test_recorded.py counts the reads of a `compare`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from orchestrator.record.paths import RunPaths
from orchestrator.record.reads import Footers
from orchestrator.record.schemas import RESPONSES
from orchestrator.record.tables import LATEST_KEY, footers_of, iter_batches, latest_rows, read_table

# A response's per-token lists, texts and bodies: streamed, never held whole. Every other column is the ledger's.
STREAMED = ("request_json", "response_body", "completion_text", "token_ids", "tokens", "token_logprobs",
            "top_logprobs", "top_gaps", "top_logprobs_entries", "prompt_logprobs")
LEDGER = [name for name in RESPONSES.names if name not in STREAMED]


@dataclass
class Reads:
    """What has been read of one run dir, kept for its next reader (a comparison's labelled copy shares it)."""

    paths: RunPaths
    footers: dict[str, Footers] = field(default_factory=dict)  # table -> its parts' footers, in the order written
    tables: dict[str, pa.Table] = field(default_factory=dict)  # a small table whole, latest attempts
    every: tuple[pa.Table, pa.Array | None] | None = None  # the ledger, every attempt; which rows are the latest
    latest: pa.Table | None = None  # the ledger, latest attempts

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
        """The responses' `columns`, latest attempts, in batches in the order written: the ledger's from memory, the
        STREAMED ones read from the parts (`dictionary`, `stand_in`: as record/tables.py iter_batches)."""
        streamed = [c for c in columns if c in STREAMED]
        if not streamed:
            yield from self.ledger().select(columns).to_batches(max_chunksize=batch_rows)
            return
        every, keep = self._every()
        offset = 0
        for batch in iter_batches(self.paths, "responses", streamed, batch_rows, dictionary, stand_in,
                                  self.parts("responses"), every_attempt=True):
            rows = every.slice(offset, batch.num_rows)  # the stream's rows are the ledger's, in the same order
            out = pa.RecordBatch.from_arrays([batch.column(c) if c in streamed else rows.column(c).combine_chunks()
                                              for c in columns], names=columns)
            yield out if keep is None else out.filter(keep.slice(offset, batch.num_rows))
            offset += batch.num_rows
