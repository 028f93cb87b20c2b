"""The project explains itself: what its files cite is in docs/, never in notes outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
