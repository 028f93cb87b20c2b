"""The project explains itself: what its files cite is in docs/, never in notes outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from orchestrator.analysis.results import Cell, Comparison
from orchestrator.report import markdown

ROOT = Path(__file__).resolve().parents[2]
# The team's notes that live beside the repository, not in it
OUTSIDE = re.compile(r"CONVENTIONS\.md|DESIGN\.md|VLLM-FACTS|VLLM-CPU\.md|TRANSFORMERS-SERVE|ENVIRONMENT\.md"
                     r"|shared/seed")
CITED_DOC = re.compile(r"docs/([\w-]+\.md)")


def text_files() -> dict[str, str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    found = {}
    for name in listed:
        path = ROOT / name
        if path.suffix in (".py", ".md", ".yaml", ".txt", ".toml", ".sh") and path.is_file():
            found[name] = path.read_text(encoding="utf-8", errors="replace")
    return found


def test_nothing_cites_notes_outside_the_repository() -> None:
    files = text_files()
    assert "docs/conventions.md" in files
    cited = [f"{name}: {match.group(0)}" for name, text in files.items() if name != "tests/unit/test_docs.py"
             for match in OUTSIDE.finditer(text)]
    assert cited == []


def test_every_cited_doc_exists() -> None:
    missing = sorted({f"{name}: docs/{doc}" for name, text in text_files().items()
                      for doc in CITED_DOC.findall(text) if not (ROOT / "docs" / doc).is_file()})
    assert missing == []


def test_the_report_cites_the_conventions_for_co_residency() -> None:
    cell = Cell(arm="a", prompt_id="p", phase="concurrent", n=16, errors=0, distinct_completions=1,
                distinct_signatures=1, divergent=0, upper_bound_95=0.17, lower_bound_95=0.0, batch_size=16,
                capacity=16, co_resident=True, batches=1, batches_kept_out=0)
    text = "\n".join(markdown._batches_section(Comparison(cells=[cell])))
    assert "A batch that was not co-resident (docs/conventions.md) is kept out of its cell's n" in text


# Documented error lines ("error: ..."), each under the `$ orchestrator ...` command that prints it: the test
# runs the command and the code must print every line (`...` stands for any text).
COMMAND = re.compile(r"^\s*\$ (orchestrator .*)$")
ERROR = re.compile(r"^\s*(error: .*)$")
# Examples whose lines come from what a unit test has not: an engine listing knobs (tests/e2e/test_check.py runs
# these against the real engine), SLURM. Keyed by a fragment of the documented line.
ENGINE_EXAMPLES = ("is not known to the engine in orchestrator/reference-engine",)
NOT_RUN = {"(the choices of --dtype in vllm": "needs vLLM's knob listing (tests/e2e/test_vllm_cpu.py runs it)",
           "Slurm job 4_1 TIMEOUT": "needs SLURM (tests/e2e/test_slurm.py)"}


def documented_errors() -> list[tuple[str, str | None, list[str]]]:
    """(doc, the command or None, its documented error lines) for every error example in docs/ and README.md."""
    found: list[tuple[str, str | None, list[str]]] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        command: str | None = None
        for text in path.read_text(encoding="utf-8").splitlines():
            if match := COMMAND.match(text):
                command = match.group(1)
                found.append((path.name, command, []))
            elif match := ERROR.match(text):
                if found and found[-1][1] == command and command is not None:
                    found[-1][2].append(match.group(1))
                else:
                    found.append((path.name, None, [match.group(1)]))
            elif text.strip().startswith("```") or not text.strip():
                command = None
    return [(doc, command, lines) for doc, command, lines in found if lines]


def matches(documented: str, said: list[str]) -> bool:
    """One of the lines said is the documented one, its `...` standing for any text."""
    pattern = ".*".join(re.escape(piece.strip()) for piece in documented.split("..."))
    return any(re.fullmatch(pattern, line.strip()) for line in said)


def test_every_documented_error_line_is_under_its_command() -> None:
    loose = [f"{doc}: {line}" for doc, command, lines in documented_errors() if command is None for line in lines
             if not any(fragment in line for fragment in NOT_RUN)]
    assert loose == []


def run_documented(command: str, cwd: Path) -> list[str]:
    """The error lines `command` prints (exit 2), run in-process in `cwd`."""
    import contextlib
    import io
    import os
    import shlex

    from orchestrator import cli

    err = io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err):
            status = cli.main(shlex.split(command)[1:])
    finally:
        os.chdir(here)
    assert status == 2, err.getvalue()
    return err.getvalue().splitlines()


def hostile_run(where: Path) -> None:
    """docs/sweeps-and-reproduce.md's `hostile-run/`: a run dir whose config asks for dangerous options."""
    from orchestrator import config
    from orchestrator.config.schema import VolumeConfig
    from orchestrator.record.paths import RunPaths
    from orchestrator.run.execute import record_config

    typed = config.to_typed(config.compose([]))
    typed.arms["baseline"].privileged = True
    typed.arms["baseline"].volumes = [VolumeConfig(host="/", container="/host")]
    record_config(RunPaths(where / "hostile-run"), typed)


UNIT_EXAMPLES = [(doc, command, lines) for doc, command, lines in documented_errors() if command is not None
                 and not any(fragment in line for line in lines for fragment in (*ENGINE_EXAMPLES, *NOT_RUN))]


@pytest.mark.parametrize(("doc", "command", "lines"), UNIT_EXAMPLES,
                         ids=[f"{d}: {c}"[:80] for d, c, _ in UNIT_EXAMPLES])
def test_documented_error_examples_are_what_the_code_says(doc: str, command: str, lines: list[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")  # no engine: what these lines say comes before it
    hostile_run(tmp_path)
    said = run_documented(command, tmp_path)
    assert [line for line in lines if not matches(line, said)] == [], said


def test_the_documented_examples_are_found() -> None:
    examples = documented_errors()
    assert len(UNIT_EXAMPLES) >= 5 and any("protocol=smok" in (c or "") for _, c, _ in examples)
    assert matches("error: a ... c", ["error: a b c"]) and not matches("error: a ... c", ["error: a b"])
