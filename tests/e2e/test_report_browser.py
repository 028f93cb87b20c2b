"""report.html in a real browser: Debian's chromium, driven by the pip `playwright` package through
`executable_path` (no Playwright browser download). `make test` installs chromium (scripts/ensure-chromium.sh);
under CI=true a missing browser fails the test, never skips it. The record is made by a whole study on the
fake runtime (real Parquet, real report); the page is opened from disk with every network request refused,
in the light and the dark theme, and a screenshot of each is kept in the run dir."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import orchestrator
from tests.recorded import noisy_study_run

pytestmark = pytest.mark.browser


def chromium_path() -> str | None:
    return os.environ.get("ORCHESTRATOR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser(run_dir: Path) -> Iterator[Any]:  # after the run: playwright runs an event loop of its own
    yield from launched_browser()


def launched_browser() -> Iterator[Any]:
    """Chromium through playwright for a module's tests; skipped where absent, failed under CI=true."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        message = "needs chromium and the playwright package: `make test` installs both (scripts/ensure-chromium.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true requires a browser: {message}")
        pytest.skip(message)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study whose second arm is noisy, reported with a gate it fails."""
    root = tmp_path_factory.mktemp("browser") / "run"
    return noisy_study_run(root, "run-browser", gate={"max_divergence_rate": 0.0}).root


def open_report(browser: Any, run_dir: Path, scheme: str, width: int = 1280) -> tuple[Any, list[str], list[str]]:
    return open_offline(browser, run_dir / "report.html", color_scheme=scheme, viewport={"width": width, "height": 900})


def open_offline(browser: Any, path: Path, **options: Any) -> tuple[Any, list[str], list[str]]:
    """The page of a file, its console errors, and every request that would leave the file (each refused)."""
    page = browser.new_page(**options)
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))

    def refuse(route: Any) -> None:  # self-contained: nothing but the file itself may load
        if not route.request.url.startswith("file://"):
            requests.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", refuse)
    page.goto(path.as_uri())
    return page, errors, requests


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_report_opens_clean_with_verdict_environment_and_pictures(run_dir: Path, browser: Any,
                                                                      scheme: str) -> None:
    page, errors, requests = open_report(browser, run_dir, scheme)
    verdict = page.inner_text("#verdict")
    assert "wide_batch: sequential:" in verdict and "distinct in" in verdict and "at 95 %" in verdict
    assert "Gate: FAILED (max_divergence_rate 0.0)" in verdict
    environment = page.inner_text("#environment")
    assert "orchestrator run --from" in environment and "orchestrator reproduce" in environment
    assert "fake-noisy" in environment and "test-host" in environment
    charts = page.eval_on_selector_all("svg.chart", "els => els.map(e => [e.getBoundingClientRect().width,"
                                                    " e.getBoundingClientRect().height, e.querySelectorAll('rect,"
                                                    " circle').length])")
    assert len(charts) >= 3 and all(w > 100 and h > 20 and marks > 0 for w, h, marks in charts)
    broken = page.eval_on_selector_all("img", "els => els.filter(e => !e.complete || e.naturalWidth === 0).length")
    assert broken == 0
    shot = run_dir / f"report-{scheme}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == ("rgb(255, 255, 255)" if scheme == "light" else "rgb(13, 17, 23)")
    assert errors == [] and requests == []
    page.close()


def test_a_click_or_enter_on_a_header_sorts_its_table(run_dir: Path, browser: Any) -> None:
    page, errors, _ = open_report(browser, run_dir, "light")
    table = "#details table:has(th:text-is('distinct signatures'))"
    first_arms = f"Array.from(document.querySelectorAll('{table.split(':has')[0]}')).find(t => t.tHead.innerText" \
                 ".includes('distinct signatures')).tBodies[0].rows[0].cells[0].textContent"
    assert page.evaluate(first_arms) == "baseline"  # the record's order: the repeatable arm first
    header = page.locator(f"{table} th", has_text="distinct signatures")
    header.click()
    header.click()  # the second click sorts descending: the noisy arm's many distinct signatures first
    assert page.evaluate(first_arms) == "wide_batch"
    assert header.get_attribute("data-dir") == "desc" and header.get_attribute("aria-sort") == "descending"
    header.focus()  # and from the keyboard: a header takes the focus, Enter sorts it the other way
    page.keyboard.press("Enter")
    assert page.evaluate(first_arms) == "baseline" and header.get_attribute("aria-sort") == "ascending"
    assert errors == []
    page.close()


def test_a_narrow_window_scrolls_wide_tables_not_the_page(run_dir: Path, browser: Any) -> None:
    page, errors, _ = open_report(browser, run_dir, "light", width=700)
    assert page.evaluate("document.documentElement.scrollWidth") <= 700  # each wide table scrolls on its own
    assert page.evaluate("Math.max(...Array.from(document.querySelectorAll('table')).map(t => t.scrollWidth))") > 700
    assert errors == []
    page.close()


def test_the_reports_are_readable_by_others_where_the_umask_lets_them(run_dir: Path) -> None:
    for name in ("report.html", "report.md", "report.json"):
        mode = stat.S_IMODE((run_dir / name).stat().st_mode)
        assert mode == 0o666 & ~_umask(), f"{name}: {oct(mode)}"
    assert json.loads((run_dir / "report.json").read_text())["gate"]["verdict"] == "failed"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_a_real_study_asked_private_reads_back_in_the_browser_and_the_terminal(tmp_path: Path, browser: Any) -> None:
    """The reference engine in Docker, private_files=true: the run dir is 0700 and what the run wrote 0600;
    its report opens clean with the engine's image id and versions; `ls` and `show` read it back."""
    run = tmp_path / "runs" / "default" / "private"
    result = orchestrator("run", f"hydra.run.dir={run}", "private_files=true", "gate.max_divergence_rate=0.5",
                          "protocol.phases.sequential.repeats=3", "protocol.phases.concurrent.repeats=3",
                          "protocol.phases.concurrent.batches=1", "protocol.request.max_tokens=8")
    assert result.returncode == 0, result.stderr[-3000:]
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for path in [run / "report.html", run / "run.json", *(run / "data" / "responses").glob("*.parquet")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    page, errors, requests = open_report(browser, run, "light")
    environment = page.inner_text("#environment")
    assert "orchestrator/reference-engine:0.1.0 = sha256:" in environment and "torch 2.13.0" in environment
    assert "Gate: passed (max_divergence_rate 0.5)" in page.inner_text("#verdict")
    assert errors == [] and requests == []
    page.close()
    listed = orchestrator("ls", str(tmp_path / "runs"))
    assert listed.returncode == 0 and "baseline, wide_batch" in listed.stdout and "gate passed" in listed.stdout
    shown = orchestrator("show", str(run))
    assert shown.returncode == 0 and f"orchestrator reproduce {run}" in shown.stdout


def test_the_explorer_opens_from_the_keyboard_and_needs_nothing_from_outside(run_dir: Path, browser: Any) -> None:
    """The noisy arm's cells each split into several signatures: Tab reaches the first one's summary, Enter opens
    it, and the branches, the split and the top-k there are shown."""
    page, errors, requests = open_report(browser, run_dir, "light")
    assert page.locator("details.explore").count() >= 1
    assert page.eval_on_selector("details.explore", "d => d.open") is False
    for _ in range(200):  # Tab through the sortable headers before it, as a keyboard user would
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.tagName") == "SUMMARY":
            break
    assert page.evaluate("document.activeElement.tagName") == "SUMMARY"
    page.keyboard.press("Enter")
    opened = page.locator("details.explore").first
    assert opened.evaluate("d => d.open") is True
    text = opened.inner_text()
    assert "branch 1" in text and "parts from modal" in text and "top1-top2 gap" in text
    assert opened.locator("td.split").count() >= 1 and opened.locator("svg.spark polyline").count() >= 2
    page.keyboard.press("Enter")  # the same key closes it again
    assert opened.evaluate("d => d.open") is False
    assert errors == [] and requests == []
    page.close()


@pytest.mark.docker
@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_the_batch_variant_study_opens_on_a_cell_that_diverged(tmp_path: Path, browser: Any) -> None:
    """The reference engine with batch invariance off, a batch of 20 on max-num-seqs 16: the engine runs 16 of its
    requests together and 4 after them, and the cell splits in two. Chromium opens that cell from the keyboard:
    the split token, the top-k of both branches there and the co-residents each branch ran with; the arms' pair
    shows where the arms split; `show --cell` prints the same."""
    run = tmp_path / "run"
    result = orchestrator("run", "study=batch_invariance", f"hydra.run.dir={run}", "protocol.request.max_tokens=8")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    [cell] = [e for e in report["explorer"] if e["label"] == "variant/capital/over_capacity"]
    modal, branch = cell["completions"]
    assert branch["split"] is not None and branch["top_at_split"] and branch["first_top_at_split"]
    assert (modal["co_residents"], branch["co_residents"]) == ([15], [3])
    page, errors, requests = open_report(browser, run, "light")
    details = page.locator(f"details.explore[data-label='{cell['label']}']")
    details.locator("summary").focus()
    page.keyboard.press("Enter")
    assert details.evaluate("d => d.open") is True
    text = details.inner_text()
    assert f"At token {branch['split']}, branch 1 parts from modal" in text and "batches #0 (size 20)" in text
    assert "ran alongside 15 others" in text and "ran alongside 3 others" in text
    assert details.locator("td.split").count() == 1 and details.locator(".topk table").count() == 2
    assert page.locator("details.explore[data-label^='invariant/']").count() == 0  # one signature per cell
    [pair] = [p for p in report["pair_explorer"] if p["phase"] == "concurrent"][:1]
    invariant, variant = pair["completions"]
    assert variant["split"] is not None and variant["batches"] == [[0, 8]] and invariant["batch_sizes"] == [1, 8, 20]
    pair_details = page.locator(f"details.explore[data-label='{pair['label']}']")
    pair_details.locator("summary").focus()
    page.keyboard.press("Enter")
    assert f"At token {variant['split']}, variant parts from invariant" in pair_details.inner_text()
    assert errors == [] and requests == []
    page.screenshot(path=str(run / "explorer-cell.png"), full_page=True)
    page.close()
    shown = orchestrator("show", str(run), "--cell", cell["label"])
    assert shown.returncode == 0 and "<- split" in shown.stdout and "ran alongside 3 others" in shown.stdout
