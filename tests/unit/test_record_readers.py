"""The record read back by its users' tools: pandas, polars and duckdb read every table of a recorded
study with the rows and columns pyarrow wrote, the examples of docs/record.md run as written, and that page
documents every column of every table (no more, no fewer)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from orchestrator.record.paths import RunPaths
from orchestrator.record.schemas import SCHEMAS
from orchestrator.record.tables import read_table
from tests.conftest import ROOT
from tests.recorded import noisy_study_run

DOC = ROOT / "docs" / "record.md"
RECORDED = ("responses", "logs", "arms")  # a study run writes these; `probes` comes from `orchestrator probe`


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunPaths:
    return noisy_study_run(tmp_path_factory.mktemp("record") / "run", "run-readers")


@pytest.mark.parametrize("table", RECORDED)
def test_pandas_polars_and_duckdb_read_what_pyarrow_wrote(run: RunPaths, table: str) -> None:
    import duckdb
    import pandas as pd
    import polars as pl

    expected = read_table(run, table)
    folder = run.table(table)
    assert expected.num_rows > 0
    frame = pd.read_parquet(folder)
    assert list(frame.columns) == SCHEMAS[table].names and len(frame) == expected.num_rows
    lazy = pl.read_parquet(f"{folder}/*.parquet")
    assert lazy.columns == SCHEMAS[table].names and lazy.height == expected.num_rows
    relation = duckdb.sql(f"SELECT * FROM read_parquet('{folder}/*.parquet', union_by_name = true)")
    assert relation.columns == SCHEMAS[table].names and len(relation.fetchall()) == expected.num_rows
    if table == "responses":  # nested columns come back nested, with the values written
        first = expected.column("top_logprobs")[0].as_py()
        assert frame["top_logprobs"].iloc[0][0][0]["logprob"] == first[0][0]["logprob"]
        assert lazy["top_logprobs"][0][0][0]["logprob"] == first[0][0]["logprob"]


def test_the_examples_of_docs_record_md_run(run: RunPaths) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3 and [("pandas" in b, "polars" in b, "duckdb" in b) for b in blocks] == [
        (True, False, False), (False, True, False), (False, False, True)]
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(block.replace("RUN_DIR", str(run.root)), {})
        assert "wide_batch" in out.getvalue() and "baseline" in out.getvalue()


def documented(text: str, table: str) -> list[str]:
    section = text.split(f"\n## {table}:", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


@pytest.mark.parametrize("table", list(SCHEMAS))
def test_docs_record_md_documents_every_column(table: str) -> None:
    assert documented(DOC.read_text(), table) == SCHEMAS[table].names
