"""`orchestrator import --prompts MAP.json` (docs/import.md): a map that is missing or no JSON, and a request saved
beside an answer that is no JSON, are each refused in one line with the fix for that file, not an answer's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator import cli

ANSWERS = Path(__file__).parents[1] / "data" / "import" / "openai" / "completions"


@pytest.mark.parametrize(("write", "said"), [
    (None, "map.json: no such file; pass --prompts a JSON map of answer file name to prompt id"),
    ("[1", "map.json: not JSON (Expecting ',' delimiter: line 1 column 3 (char 2)); pass --prompts a JSON map"),
])
def test_a_bad_map_is_refused_naming_the_map_s_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  write: str | None, said: str) -> None:
    if write is not None:
        (tmp_path / "map.json").write_text(write)
    status = cli.main(["import", str(ANSWERS), "--out", str(tmp_path / "run"), "--prompts", str(tmp_path / "map.json")])
    err = capsys.readouterr().err
    assert status == 2 and said in err and "pass the answer" not in err  # before: "not JSON ...; pass the answer"
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_a_request_beside_an_answer_that_is_no_json_names_the_request_s_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = shutil.copytree(ANSWERS, tmp_path / "answers")
    (answers / "p0_r0.request.json").write_text("{")
    assert cli.main(["import", str(answers), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "p0_r0.request.json: not JSON" in err and "save the request body exactly as it was sent" in err
