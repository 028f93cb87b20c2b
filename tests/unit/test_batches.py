"""Per-batch co-residency: the server's trace preferred to /metrics, batches that were not co-resident kept
out of the cell's verdict, transport errors counted, and the cold and warm-up requests in no cell."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from orchestrator.analysis import batches
from orchestrator.analysis.results import Cell
from orchestrator.run.send.protocol import server_view


def cell() -> Cell:
    return Cell("a", "p", "conc", 0, 0, 0, None, None, None, None)


def rows(spec: list[tuple[int, int | None, int | None, str | None]], kind: str | None = None) -> pa.Table:
    """(batch_id, server together, /metrics running, error) a row; `kind`: every error's kind (None: a record
    of schema 6, without kinds)."""
    return pa.Table.from_pylist([
        {"phase_kind": "concurrent", "batch_id": b, "error": e, "error_kind": kind if e else None,
         "batch_send_spread_ns": 2_000_000, "batch_running_max": m, "batch_arrival_spread_ns": 1_000_000,
         "batch_server_together": t}
        for b, t, m, e in spec])


def test_transport_errors_are_counted_by_their_recorded_kind_not_their_words() -> None:
    said = [(0, 2, None, "ReadError: the words of a transport error")] * 2
    for kind, transport in (("answer", 0), ("http", 0), ("cut", 0), ("refused", 2), ("timeout", 2), ("read", 2)):
        [found], _ = batches.check(cell(), None, rows(said, kind))
        assert (found.errors, found.transport_errors) == (2, transport), kind
    [found], _ = batches.check(cell(), None, rows([(0, 2, None, "no answer in 5 s")] * 2, "timeout"))
    assert found.transport_errors == 2


def test_a_batch_that_was_not_co_resident_is_kept_out_and_said() -> None:
    table = rows([(0, 4, 1, None)] * 4 + [(1, 2, 4, None)] * 3 + [(1, 2, 4, "ReadError: connection reset")])
    c = cell()
    found, keep = batches.check(c, None, table)
    assert [b.co_resident for b in found] == [True, False]  # the trace wins over /metrics, both ways
    assert [b.together_source for b in found] == ["server trace", "server trace"]
    assert keep.tolist() == [True] * 4 + [False] * 4
    assert found[1].errors == 1 and found[1].transport_errors == 1 and c.transport_errors == 1
    assert (c.co_resident, c.batches, c.batches_kept_out, c.min_running_observed) == (False, 2, 1, 2)
    assert c.max_send_spread_ms == 2.0 and c.max_arrival_spread_ms == 1.0


def test_metrics_are_the_fallback_and_capacity_makes_a_queued_batch_co_resident() -> None:
    c = cell()
    found, keep = batches.check(c, 2, rows([(0, None, 2, None)] * 8))
    assert found[0].together_source == "/metrics" and found[0].co_resident and keep.all()
    unknown, keep = batches.check(cell(), None, rows([(0, None, None, None)] * 3))
    assert unknown[0].co_resident is None and keep.all()  # unknown is not "not co-resident"


def test_sequential_rows_have_no_batches() -> None:
    table = pa.Table.from_pylist([{"phase_kind": "sequential", "batch_id": 0, "error": None,
                                   "batch_send_spread_ns": None, "batch_running_max": None,
                                   "batch_arrival_spread_ns": None, "batch_server_together": None}] * 3)
    found, keep = batches.check(cell(), None, table)
    assert found == [] and keep.all()


def trace(arrival: int, first: int, last: int) -> dict[str, Any]:
    return {"server_arrival_ns": arrival, "server_first_step": first, "server_last_step": last}


def test_server_view_counts_requests_sharing_an_engine_step() -> None:
    # Two engine batches: steps 0-16 (three requests) then 17-33 (two): at most 3 ran together.
    spread, together = server_view([trace(10, 0, 16), trace(12, 0, 16), trace(15, 0, 9), trace(40, 17, 33),
                                    trace(41, 17, 30)])
    assert (spread, together) == (31, 3)
    assert server_view([trace(5, 0, 4), trace(6, 4, 8)]) == (1, 2)  # both ran in step 4
    assert server_view([{"server_arrival_ns": None, "server_first_step": None}]) == (None, None)


def test_a_batch_no_metrics_sample_showed_running_is_not_observed_never_at_most_0() -> None:
    """A loaded machine: /metrics was read during the batch of 16, but every reading fell before its requests
    reached the engine or after they left (0 running). The requests ran: 0 is no count. Not observed, kept out
    of the verdict, and said so; a batch another reading saw stays in."""
    from orchestrator.report.headline import phase_clause
    from orchestrator.report.markdown import headline

    c = cell()
    found, keep = batches.check(c, 16, rows([(0, None, 0, None)] * 16 + [(1, None, 16, None)] * 16))
    assert [b.together for b in found] == [None, 16]
    assert [b.together_source for b in found] == ["not observed", "/metrics"]
    assert [b.co_resident for b in found] == [None, True]
    assert keep.tolist() == [False] * 16 + [True] * 16  # kept out, as a batch not co-resident is
    assert (c.min_running_observed, c.co_resident, c.batches_kept_out, c.batches_not_observed) == (16, True, 1, 1)
    c.batch_size, c.n, c.distinct_signatures, c.upper_bound_95 = 16, 16, 1, 0.17
    said = phase_clause("concurrent", [c], 0.01)
    assert said.startswith("concurrent 16, co-resident 16; co-residency not observed in 1 of 2 batches (no "
                           "/metrics sample showed it running; kept out of the verdict)"), said
    alone = cell()
    batches.check(alone, 16, rows([(0, None, 0, None)] * 16))
    alone.batch_size, alone.n = 16, 0
    said = phase_clause("concurrent", [alone], 0.01)
    assert said.startswith("concurrent 16, co-residency not observed in 1 of 1 batch (no /metrics sample"), said
    assert "at most 0" not in said and "NOT co-resident" not in said
    from orchestrator.analysis.results import Comparison

    whole = headline(Comparison(cells=[alone], batches=batches.check(cell(), 16, rows([(0, None, 0, None)] * 16))[0]))
    assert "1 of 1 concurrent batches' co-residency was not observed" in whole and "not co-resident" not in whole


def test_a_zero_reading_is_no_count_in_the_explorer_either() -> None:
    from orchestrator.analysis.explorer import _together

    def metrics(running: int) -> pa.Table:
        return pa.table({"batch_server_together": pa.array([None] * 4, pa.int64()),
                         "batch_running_max": pa.array([running] * 4, pa.int64())})

    assert _together(metrics(0)) == set()  # "its batches had 0 running at once" is never written
    assert _together(metrics(3)) == {3}


def test_a_cell_whose_only_batch_was_not_observed_does_not_read_not_co_resident(tmp_path: Any) -> None:
    """The cell's rate column: its batch was kept out because nothing showed it, not because it was apart."""
    from orchestrator.analysis.compare import compare
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import TableWriter

    paths = RunPaths(tmp_path)
    with TableWriter(paths, "responses", "r") as writer:
        for i in range(4):
            writer.append({"study": "s", "run_id": "r", "arm": "a", "prompt_id": "p", "phase": "conc",
                           "phase_kind": "concurrent", "role": "measured", "attempt": 0, "batch_id": 0,
                           "request_id": f"a/p/conc/0/{i}", "batch_running_max": 0, "sig_top_logprobs": "x",
                           "completion_text": "x", "send_ns": 0, "recv_ns": 1})
    [c] = compare(paths, "a").cells
    assert c.signature_note == "no batch shown co-resident: kept out of the verdict", c.signature_note
