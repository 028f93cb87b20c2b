"""Every figure in docs/ quoted from a run names a committed file that holds it (docs/benchmarks.md, "Where a figure
comes from"). The rule, checked per paragraph of docs/*.md (a block between blank lines; a table is one block):

- a paragraph cites its raw data by naming a path under docs/probe-results/ (a Markdown link
  `[x](probe-results/...)` or a path in backticks, with or without the leading `docs/`), and every path so named
  is a file or folder committed in git;
- in a paragraph that cites such files, every figure quoted from them, that is every double-quoted text holding a
  digit ("onset in [2028, 2052] at 95 %", "x1.094"), appears verbatim in one of the files it cites (every file
  under a cited folder), after collapsing runs of spaces;
- a claim listed in MEASURED (the figures issue 45 found without data) sits in a paragraph that cites a file;
- a paragraph that says it measured ("Measured ...", "On this machine ..."), outside docs/benchmarks.md, cites a
  committed file, a test that asserts it (tests/...py), or another doc that holds its figures, or says that its
  output was "not kept". docs/benchmarks.md says so once, at its top, for its older sections.
Figures outside quotes (a ratio worked out, a range over rounds) are the writer's reading of the cited file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"(?:docs/)?(probe-results/[\w./-]+[\w/])")
QUOTED = re.compile(r"\"([^\"]*)\"")  # quotes pair in order: the 1st with the 2nd, the 3rd with the 4th
# (doc, a measured claim's text): each must stay in a paragraph that cites its data (or be dropped from both)
MEASURED = [
    ("gpu-validation.md", "it picks 8, 23 and 3 after the first two results"),
    ("onset.md", "onset in [2028, 2052] at 95 %"),
    ("benchmarks.md", "the median of 3 rounds"),
    ("load.md", "rate within 1 % met"),
    ("load.md", "a send lateness p99 of"),
    ("locate.md", "it names two kinds of first split"),
]


SAYS_MEASURED = re.compile(r"(^|[.:] |\(|\*\*)(Measured\b|On this (machine|CPU|2-core))")
BACKED = re.compile(r"tests/[\w/]+\.py|\b[\w-]+\.md\b|not kept")


def committed() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "docs/probe-results"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return set(listed)


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def cited_files(paragraph: str, files: set[str]) -> tuple[list[str], list[str]]:
    """(the committed files the paragraph's citations cover, the cited paths that are not committed)."""
    covered, missing = [], []
    for path in CITED.findall(paragraph):
        path = "docs/" + path.rstrip("/.")
        inside = [f for f in files if f == path or f.startswith(path + "/")]
        (covered.extend(inside) if inside else missing.append(path))
    return covered, missing


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_cited_data_file_is_committed() -> None:
    files = committed()
    missing = [f"{doc.name}: {path}" for doc in sorted((ROOT / "docs").glob("*.md"))
               for p in paragraphs(doc.read_text()) for path in cited_files(p, files)[1]]
    assert missing == []


def test_every_quoted_figure_is_in_a_file_its_paragraph_cites() -> None:
    files, absent, checked = committed(), [], 0
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for p in paragraphs(doc.read_text()):
            covered = cited_files(p, files)[0]
            if not covered:
                continue
            data = "\n".join(flat((ROOT / f).read_text(errors="replace")) for f in covered)
            for figure in (q for q in QUOTED.findall(flat(p)) if re.search(r"\d", q)):
                checked += 1
                if flat(figure) not in data:
                    absent.append(f"{doc.name}: \"{figure}\" is in none of {sorted(covered)}")
    assert absent == [] and checked >= 4, absent


def test_the_claims_found_without_data_cite_their_files() -> None:
    files = committed()
    loose = []
    for name, claim in MEASURED:
        found = [p for p in paragraphs((ROOT / "docs" / name).read_text()) if claim in flat(p)]
        if not found or not all(cited_files(p, files)[0] for p in found):
            loose.append(f"{name}: {claim!r} {'is not there' if not found else 'cites no committed file'}")
    assert loose == []


def test_every_measured_paragraph_says_where_its_data_is() -> None:
    files, loose = committed(), []
    assert "their raw output was not committed" in flat((ROOT / "docs" / "benchmarks.md").read_text())
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for p in paragraphs(doc.read_text()) if doc.name != "benchmarks.md" else []:
            text = flat(p)
            if not text.startswith("#") and SAYS_MEASURED.search(text) and not cited_files(p, files)[0] \
                    and not BACKED.search(text):
                loose.append(f"{doc.name}: {text[:100]}")
    assert loose == []


def test_the_rule_catches_a_figure_its_file_does_not_hold(tmp_path: Path) -> None:
    files = {"docs/probe-results/x/out.txt"}
    good = 'It printed "x0.967" ([out](probe-results/x/out.txt)).'
    assert cited_files(good, files) == (["docs/probe-results/x/out.txt"], [])
    assert QUOTED.findall('"x0.967" and "none", "x1.2"') == ["x0.967", "none", "x1.2"]
    assert cited_files("see `docs/probe-results/y/` for it", files) == ([], ["docs/probe-results/y"])
    assert SAYS_MEASURED.search("Measured: 6 min") and not SAYS_MEASURED.search("the time measured")
    assert not BACKED.search("Measured: 6 min on this machine")
