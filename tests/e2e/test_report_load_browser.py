"""report.html of a study with load points in a real browser (Debian's chromium through playwright, as
tests/e2e/test_report_browser.py): the page opens with the three lines per arm (a load point each a sub-bullet,
drawn indented), the divergence-against-load chart draws, nothing is fetched, nothing logs an error. The record
is tests/load_record.py's synthetic one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.record.recorded import read
from orchestrator.report.build import build
from tests.e2e.test_report_browser import launched_browser, open_report
from tests.load_record import ArmPlan, write_load_record

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    paths = write_load_record(tmp_path_factory.mktemp("load") / "run", {
        "base": [ArmPlan([0.10, 0.11, 0.09], ready_s=[4.1, 3.9, 4.4], traced=True),
                 ArmPlan([0.2, 0.21, 0.19], rate_per_s=32, phase="load_32", divergent_probes=1, traced=True)],
        "plain": ArmPlan([0.3], streamed=False, ready_s=[5.0])})
    build(read(paths))
    return paths.root


@pytest.fixture(scope="module")
def browser(run_dir: Path) -> Iterator[Any]:
    yield from launched_browser()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_load_report_opens_with_each_arms_three_lines_and_its_frontier(run_dir: Path, browser: Any,
                                                                          scheme: str) -> None:
    page, errors, requests = open_report(browser, run_dir, scheme)
    opening = page.inner_text("#opening")
    assert "Starts: 3 of 3 (failure rate 0 %, at most 63 % at 95 %); time to ready 4.1 s (3.9-4.4 s)" in opening
    assert "at poisson 8/s: 0 of 6 probes diverged (at most 39 %)" in opening
    assert "time to first token not observable: not streamed" in opening
    assert "Costs: peak memory 2.0 GiB, no GPU; per load point:" in opening
    # a sub-bullet per load point, drawn further in than the line it belongs to
    head, point = page.locator("#opening p.item.l1", has_text="Costs: peak memory"), page.locator(
        "#opening p.item.l2", has_text="at poisson 32/s: ").last
    assert point.bounding_box()["x"] > head.bounding_box()["x"] + 10
    assert page.locator("#details th", has_text="top-1 flips").count() == 1
    top = page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)")
    assert top[:3] == ["title", "opening", "verdict"]
    chart = page.locator("svg.chart[aria-label='base: divergence against offered load, beside throughput']")
    box = chart.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 100
    assert chart.locator("circle").count() == 4  # two load points, each a rate and a throughput
    assert "Divergence against offered load" in page.inner_text("#details")
    page.screenshot(path=str(run_dir / f"load-{scheme}.png"), full_page=True)
    assert errors == [] and requests == []
    page.close()
