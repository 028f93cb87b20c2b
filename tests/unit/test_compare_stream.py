"""The comparison's faster paths (issue 35 item 9a) against the plain computations they stand in for: rows that
differ from the reference, the spread over them, the batch flag of concurrent rows, and the explorer's second read
from the stream's footers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from orchestrator.analysis import positions
from orchestrator.analysis.alignment import read_details
from orchestrator.analysis.cells import iter_cells
from orchestrator.analysis.compare import compare
from orchestrator.record.recorded import of
from tests.unit.test_compare import record, row


@pytest.mark.parametrize("width", [0, 1, 7, 8, 16, 24, 65])
def test_rows_that_differ_are_found_as_any_row_wise_finds_them(width: int) -> None:
    rng = np.random.default_rng(width)
    matrix = np.repeat(rng.integers(0, 3, size=(1, width)), 40, axis=0)
    if width:
        matrix[::7, rng.integers(0, width)] += 1
    for reference in (0, 1, 39):
        assert (positions._rows_differ(matrix, matrix[reference]) ==
                (matrix != matrix[reference]).any(axis=1)).all()


def test_the_spread_over_the_rows_that_differ_is_the_spread_over_all() -> None:
    rng = np.random.default_rng(3)
    same = rng.normal(size=(1, 16))
    for nan_at in (None, 2):
        matrix = np.repeat(same, 30, axis=0)
        matrix[5, 4] -= 0.25
        matrix[9, 15] += 0.5
        if nan_at is not None:
            matrix[20:, nan_at] = np.nan  # shorter answers: NaN padding, in the reference too below
        for reference in (0, 25):
            assert np.array_equal(positions._spread(positions._other_rows(matrix, reference)),
                                  positions._spread(matrix), equal_nan=True)


def test_a_cell_knows_whether_a_row_of_it_is_concurrent(tmp_path: Path) -> None:
    rows = [row("a", "p", "seq", [1])] * 2 + [row("a", "p", "conc", [1], kind="concurrent", batch_id=b)
                                            for b in (0, 0, 1, 1)]
    cuts = {cut.key: cut.concurrent for cut in iter_cells(record(tmp_path, rows))}
    assert cuts == {("a", "p", "seq"): False, ("a", "p", "conc"): True}
    assert [b.phase for b in compare(record(tmp_path / "again", rows)).batches] == ["conc", "conc"]


def test_the_explorer_reads_the_same_rows_from_the_streams_footers(tmp_path: Path) -> None:
    rows = [row("a", "p", "seq", [1, 2], request_id=f"a/p/seq/0/{i}") for i in range(6)]
    rows += [row("a", "p", "seq", [1, 3], request_id="a/p/seq/0/6")]
    paths = record(tmp_path, rows)
    recorded = of(paths)
    for _ in iter_cells(recorded):
        pass
    assert len(recorded.runs[0].reads.parts("responses")) == 3  # parts of 3 rows, their footers kept
    wanted = {"a/p/seq/0/1", "a/p/seq/0/6"}
    shared, alone = read_details(recorded, wanted), read_details(of(paths), wanted)
    assert shared.keys() == alone.keys() == wanted
    assert [shared[i].codes for i in sorted(wanted)] == [[1, 2], [1, 3]] == [alone[i].codes for i in sorted(wanted)]


def test_a_part_without_a_wanted_request_is_not_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [row("a", "p", "seq", [1], request_id=f"a/p/seq/0/{i}") for i in range(6)]
    recorded = of(record(tmp_path, rows))
    for _ in iter_cells(recorded):
        pass
    opened: list[Path] = []
    real = pq.ParquetFile

    def spy(path: Path, *args: object, **kwargs: object) -> pq.ParquetFile:
        opened.append(Path(path))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(pq, "ParquetFile", spy)
    found = read_details(recorded, {"a/p/seq/0/4"})
    assert list(found) == ["a/p/seq/0/4"] and len(opened) == 1
