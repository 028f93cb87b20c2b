"""`orchestrator matrix` over run dirs from three hosts, opened in chromium (issue 49): a CPU VM's and an H100's
run committed under docs/probe-results/, and a run this test makes with an arm on CI's second Docker host (over
ssh://, scripts/ci-hosts.sh). The page is opened from disk with every network request refused; typing in a
column's filter hides the rows that lack it; each row's evidence link names a report that exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, orchestrator
from tests.e2e.test_report_browser import launched_browser, open_offline
from tests.hosts import Hosts, hosts_fixture, nothing_left_remote_fixture  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser
RESULTS = ROOT / "docs" / "probe-results"
COMMITTED = [RESULTS / "cpu-2026-12-06" / "control_precision",
             RESULTS / "h100-load-extended" / "transformers_load_cost"]
SMALL = ["protocol=probe", "protocol.phases.sequential.repeats=2"]


@pytest.fixture(scope="module")
def remote_run(hosts: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third host's run: wide_batch on the second Docker engine (before the browser: playwright runs an
    event loop of its own)."""
    run_dir = tmp_path_factory.mktemp("matrix-remote") / "run"
    result = orchestrator("run", f"hydra.run.dir={run_dir}", f"arms.wide_batch.docker_host={hosts.ssh_url}",
                          "study.variables.wide_batch=[engine_args.max-num-seqs,docker_host]", *SMALL,
                          env=hosts.env())
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_browser()


def built(run_dirs: list[Path], out: Path) -> Path:
    result = orchestrator("matrix", *map(str, run_dirs), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cells" in result.stdout and (out / "matrix.html").is_file()
    return out / "matrix.html"


def opened(browser: Any, page_path: Path) -> tuple[Any, list[str], list[str]]:
    return open_offline(browser, page_path, viewport={"width": 1600, "height": 900})


def visible(page: Any, column: str) -> list[str]:
    index = page.eval_on_selector_all("thead tr:first-child th", f"hs => hs.map(h => h.textContent)"
                                      f".indexOf({column!r})")
    return list(page.eval_on_selector_all("tbody tr:not([hidden])", f"rs => rs.map(r => r.cells[{index}]"
                                          ".textContent)"))


def filter_by(page: Any, column: str, text: str) -> None:
    page.fill(f'thead input[data-column="{column}"]', text)


def check_page(browser: Any, page_path: Path, hardware: set[str]) -> Any:
    page, errors, requests = opened(browser, page_path)
    assert errors == [] and requests == []
    everything = visible(page, "hardware")
    assert {h for h in hardware if any(h in shown for shown in everything)} == hardware
    filter_by(page, "hardware", "H100")
    gpu_only = visible(page, "hardware")
    assert gpu_only and len(gpu_only) < len(everything) and all("H100" in h for h in gpu_only)
    assert page.inner_text("#shown") == str(len(gpu_only))
    filter_by(page, "hardware", "")
    assert len(visible(page, "hardware")) == len(everything)
    for link in page.eval_on_selector_all("tbody a", "as => as.map(a => a.href)"):
        assert Path(link.removeprefix("file://")).is_file(), link
    return page


def test_the_matrix_of_two_hosts_committed_runs_filters_in_chromium(browser: Any, tmp_path: Path) -> None:
    check_page(browser, built(COMMITTED, tmp_path / "matrix"), {"Intel", "NVIDIA H100 80GB HBM3"})


@pytest.mark.docker
@pytest.mark.hosts
@pytest.mark.usefixtures("no_leftover_containers", "nothing_left_remote")
def test_the_matrix_of_three_hosts_runs_filters_in_chromium(remote_run: Path, browser: Any, tmp_path: Path) -> None:
    page = check_page(browser, built([*COMMITTED, remote_run], tmp_path / "matrix"),
                      {"Intel", "NVIDIA H100 80GB HBM3"})
    filter_by(page, "runtime", "ssh")
    assert visible(page, "arm") and set(visible(page, "arm")) == {"wide_batch"}  # the arm on the second engine
    filter_by(page, "runtime", "")
    assert set(visible(page, "runtime")) >= {"process", "docker", "ssh"}
