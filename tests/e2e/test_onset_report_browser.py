"""An onset search's report.html in a real browser (as tests/e2e/test_report_browser.py opens a run's): the run
dirs are links that open each job's report.html, no Markdown is left raw, and the chart's rate scale is drawn
in the page's own text colour, in the light and the dark theme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.report.onset import write_reports
from tests.e2e.test_report_browser import launched_browser, open_report
from tests.unit.test_onset_report import job, state

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("onset-browser")
    write_reports(root, state([job(250, None, None, k=0, dir="3"), job(260, 0, 2, dir="4")]))
    for name in ("3", "4"):
        (root / name).mkdir()
        (root / name / "report.html").write_text(f"<!doctype html><title>job {name}</title>")
    return root


@pytest.fixture(scope="module")
def browser(sweep_dir: Path) -> Iterator[Any]:
    yield from launched_browser()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_onset_report_links_its_jobs_and_scales_its_chart(sweep_dir: Path, browser: Any, scheme: str) -> None:
    page, errors, requests = open_report(browser, sweep_dir, scheme)
    links = page.eval_on_selector_all("td a", "els => els.map(e => e.textContent)")
    assert links == ["3", "4"] and "](" not in page.inner_text("body")
    ticks = page.eval_on_selector_all("svg text", "els => els.map(e => [e.textContent, getComputedStyle(e).fill])")
    text_colour = page.evaluate("getComputedStyle(document.body).color")
    scale = [fill for label, fill in ticks if label in ("0.00", "0.25", "0.50", "0.75", "1.00")]
    assert len(scale) == 5 and set(scale) == {text_colour}, (ticks, text_colour)  # readable in either theme
    page.screenshot(path=str(sweep_dir / f"report-{scheme}.png"), full_page=True)
    page.click("td a >> nth=1")
    assert page.title() == "job 4"
    assert errors == [] and requests == []
    page.close()
