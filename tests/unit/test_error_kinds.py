"""Errors as data: a failed send's kind is classified in one place (run/wire/transport.py) at send time and recorded
next to its words; readers ask the kind (record/failures.py), and a record of schema 6 (words only) reads with
the kind its words say, as its readers counted it."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import h11
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.analysis import batches
from orchestrator.analysis.results import Cell
from orchestrator.record.failures import TRANSPORT, ErrorKind, kind_of
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from orchestrator.run.wire.transport import kind

ROOT = Path(__file__).resolve().parents[2]
OLD_RUN = ROOT / "docs/probe-results/h100-locate/attribution"  # written with record schema 6


def _wrapped(outer: type[httpx.HTTPError], inner: BaseException) -> httpx.HTTPError:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer("wrapped") from exc
    except httpx.HTTPError as exc:
        return exc


@pytest.mark.parametrize(("exc", "stage", "expected"), [
    (ConnectionRefusedError(111, "refused"), ErrorKind.CONNECT, ErrorKind.REFUSED),
    (_wrapped(httpx.ConnectError, ConnectionRefusedError(111, "refused")), ErrorKind.READ, ErrorKind.REFUSED),
    (httpx.ConnectError("no route"), ErrorKind.READ, ErrorKind.CONNECT),
    (httpx.ConnectTimeout("slow"), ErrorKind.READ, ErrorKind.TIMEOUT),
    (httpx.ReadTimeout("slow"), ErrorKind.READ, ErrorKind.TIMEOUT),
    (TimeoutError(), ErrorKind.CONNECT, ErrorKind.TIMEOUT),
    (httpx.ReadError("reset"), ErrorKind.CONNECT, ErrorKind.READ),
    (httpx.WriteError("pipe"), ErrorKind.READ, ErrorKind.WRITE),
    (httpx.RemoteProtocolError("Server disconnected"), ErrorKind.READ, ErrorKind.PROTOCOL),
    (h11.RemoteProtocolError("Server disconnected"), ErrorKind.READ, ErrorKind.PROTOCOL),
    (ConnectionResetError(104, "reset"), ErrorKind.READ, ErrorKind.READ),
    (BrokenPipeError(32, "pipe"), ErrorKind.WRITE, ErrorKind.WRITE),
    (OSError("unreachable"), ErrorKind.CONNECT, ErrorKind.CONNECT),
])
def test_an_exception_of_the_transport_is_classified_once(exc: BaseException, stage: ErrorKind,
                                                          expected: ErrorKind) -> None:
    assert kind(exc, stage) is expected


# The words schema 6's senders wrote, and whether its reader (analysis/batches.py) counted them as transport.
OLD_WORDS = [
    ("ReadTimeout: no answer in 5 s", True), ("ReadError: connection reset", True), ("ReadError", True),
    ("RemoteProtocolError: Server disconnected without sending a response.", True),
    ("ConnectError: [Errno 111] Connection refused", True), ("ConnectTimeout: no connection in 10 s (not sent)", True),
    ("ConnectError: cannot resolve h: gaierror: no such host (not sent)", True),
    ("WriteError: ConnectionResetError: reset (not sent)", True),
    ("WriteError: BrokenPipeError: pipe (not sent)", False),
    ("HTTP 500", False), ("HTTP 400; prompt tokens: sent 3, usage says 4", False), ("cut", False),
    ("not sent: the engine had died (request 3 of 8)", False), ("no choices in the answer", False),
]


@pytest.mark.parametrize(("words", "transport"), OLD_WORDS)
def test_a_schema_6_error_gets_the_kind_its_words_say(words: str, transport: bool) -> None:
    assert (kind_of(words, None) in TRANSPORT) is transport
    assert kind_of(words, "answer") is ErrorKind.ANSWER  # a recorded kind wins over the words
    assert kind_of(None, None) is None


def test_a_committed_schema_6_record_reads_with_kinds_from_its_words(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    [part] = sorted((run / "data/responses").glob("invariant-00002.parquet"))
    old = pq.read_table(part)
    assert old.schema.metadata[b"orchestrator.schema_version"] == b"6" and "error_kind" not in old.schema.names
    said = ["ReadError: connection reset", "HTTP 500"] + [None] * (old.num_rows - 2)
    old = old.set_column(old.schema.get_field_index("error"), "error", pa.array(said, pa.string()))
    pq.write_table(old, part)  # still schema 6 (its metadata kept), now with two errors
    rows = read_table(RunPaths(run), "responses", ["arm", "phase_kind", *batches.COLUMNS[1:]])
    rows = rows.filter(pa.compute.equal(rows.column("arm"), "invariant"))
    assert rows.column("error_kind").null_count == rows.num_rows  # no kinds in schema 6: read as nulls
    mine = rows.filter(pa.compute.is_valid(rows.column("batch_id")))
    found, _ = batches.check(Cell("invariant", "p", "c", 0, 0, 0, None, None, None, None), None,
                             mine.select(batches.COLUMNS))
    assert sum(b.errors for b in found) == 2 and sum(b.transport_errors for b in found) == 1


WORDS_OF_HTTPX = re.compile(r"\b(ReadError|ReadTimeout|ConnectError|ConnectTimeout|RemoteProtocolError|WriteError)\b"
                            r"|timed out", re.IGNORECASE)


def test_no_module_matches_or_forges_an_error_by_its_words() -> None:
    """Only record/failures.py reads words (for schema 6 records); no sender writes httpx's names by hand."""
    found = []
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() == "orchestrator/record/failures.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {m}" for m in WORDS_OF_HTTPX.findall(node.value)]
    assert not found


def test_the_httpx_client_records_a_refused_connection_as_refused() -> None:
    """httpx says only "All connection attempts failed": the kind comes from the socket's error beneath."""
    import asyncio
    import socket

    from orchestrator.run.wire.client import CompletionClient

    async def send(url: str) -> tuple[str | None, ErrorKind | None]:
        client = CompletionClient(url, timeout_s=5.0)
        try:
            exchange = await client.complete({"prompt": "x"})
        finally:
            await client.aclose()
        return exchange.error, exchange.error_kind

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        error, found = asyncio.run(send(f"http://127.0.0.1:{closed.getsockname()[1]}"))
    assert found is ErrorKind.REFUSED and (error or "").startswith("ConnectError")
