"""A load point end to end (study load_point): the reference engine in Docker, real pacing, real rows."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator, ran

pytestmark = pytest.mark.docker

WINDOW, WINDOWS = 12, 6  # conf/protocol/load.yaml: 6 windows of 12, every 3rd a probe, a warm-up of 4


@pytest.fixture(scope="module")
def load_run(tmp_path_factory: pytest.TempPathFactory, docker_client) -> Path:  # type: ignore[no-untyped-def]
    return ran(tmp_path_factory, "load", "study=load_point")


def test_every_request_of_the_load_point_has_one_row_with_its_role(load_run: Path) -> None:
    rows = pq.read_table(load_run / "data" / "responses").to_pylist()
    meta = json.loads((load_run / "run.json").read_text())
    added = {p["arm"]: p["steady"]["windows_added"] for p in
             json.loads((load_run / "report.json").read_text())["cost"]["phases"]}
    for arm in ("baseline", "wide_batch"):
        mine = [r for r in rows if r["arm"] == arm]
        load = [r for r in mine if r["phase_kind"] == "load" and r["role"] != "warmup"]
        # the plan's windows, and any sent past them while the load point was not steady (at most 3)
        windows = len({r["batch_id"] for r in load})
        assert WINDOWS <= windows <= WINDOWS + 3 and added[arm] == list(range(WINDOWS, windows))
        assert meta["expected_requests_per_arm"] == 1 + 4 + WINDOWS * WINDOW
        assert len(mine) == 1 + 4 + windows * WINDOW
        assert Counter(r["role"] for r in mine) == {"cold": 1, "warmup": 4, "measured": windows * WINDOW // 3,
                                                    "background": windows * WINDOW * 2 // 3}
        assert len({r["request_id"] for r in mine}) == len(mine)
        assert Counter(r["batch_id"] for r in load) == dict.fromkeys(range(windows), WINDOW)
        assert all(r["error"] is None and r["http_status"] == 200 for r in mine)
        assert {r["load_point"] for r in load} == {"poisson 8/s, at most 16 at once"}
        assert {r["offered_rate_per_s"] for r in load} == {8.0}
        for r in load:  # the record holds the pacing error and the answer's times
            assert r["scheduled_ns"] <= r["send_ns"] <= r["first_byte_ns"] <= r["recv_ns"]
            assert r["streamed"] is True, r["request_id"]  # conf/protocol/load.yaml streams; the engine can
            assert r["first_token_ns"] is not None and r["first_token_ns"] >= r["first_byte_ns"]
            assert len(r["inter_token_ns"]) == max(r["completion_tokens"] - 1, 0)


def test_sends_keep_to_the_schedule(load_run: Path) -> None:
    rows = pq.read_table(load_run / "data" / "responses").to_pylist()
    load = [r for r in rows if r["phase_kind"] == "load" and r["role"] in ("measured", "background")]
    lateness_ms = [(r["send_ns"] - r["scheduled_ns"]) / 1e6 for r in load]
    assert statistics.median(lateness_ms) < 5, sorted(lateness_ms)[-10:]
    for arm in ("baseline", "wide_batch"):
        for window in range(WINDOWS):
            mine = sorted((r for r in load if r["arm"] == arm and r["batch_id"] == window), key=lambda r: r["repeat"])
            sent = (mine[-1]["send_ns"] - mine[0]["send_ns"]) / 1e9
            meant = (mine[-1]["scheduled_ns"] - mine[0]["scheduled_ns"]) / 1e9
            assert sent == pytest.approx(meant, rel=0.05)  # the achieved rate is the schedule's


def test_probes_form_the_cells_and_the_background_none(load_run: Path) -> None:
    report = json.loads((load_run / "report.json").read_text())
    cells = [c for c in report["cells"] if c["phase"] == "load"]
    assert {(c["arm"], c["prompt_id"]) for c in cells} == {(a, p) for a in ("baseline", "wide_batch")
                                                            for p in ("capital", "count")}
    assert all(c["n"] == 12 for c in cells), cells  # 2 probes of each prompt a window


def test_the_synthetic_background_is_varied_and_each_row_says_if_its_prefix_was_seen(tmp_path: Path) -> None:
    """The default background with half of it reusing a prefix, one arm's worth of windows on the reference engine:
    the recorded prompts are varied, and prefix_seen matches the prompts the window had sent before."""
    at = "protocol.phases.load.load"
    run_dir = tmp_path / "run"
    result = orchestrator("run", "study=load_point", f"hydra.run.dir={run_dir}", f"{at}.background=synthetic",
                          f"{at}.synthetic.prefix_share=0.5", f"{at}.synthetic.input_words_mean=30", f"{at}.windows=2",
                          f"{at}.requests=24", f"{at}.probe_every=4")  # 6 probes and 18 background a window
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pq.read_table(run_dir / "data" / "responses").to_pylist()
    assert {r["prefix_seen"] for r in rows if r["phase_kind"] != "load"} == {None}
    for arm in ("baseline", "wide_batch"):
        for window in (0, 1):
            mine = sorted((r for r in rows if r["arm"] == arm and r["batch_id"] == window and r["role"] != "warmup"
                           and r["phase_kind"] == "load"), key=lambda r: r["repeat"])
            prompts = [json.loads(r["request_json"])["prompt"] for r in mine]
            background = [p for p, r in zip(prompts, mine, strict=True) if r["role"] == "background"]
            assert len(set(background)) == len(background) == 18  # every background request its own prompt
            reusing = [r for r in mine if "+" in r["prompt_id"]]
            assert 3 <= len(reusing) <= 15
            for i, r in enumerate(mine):  # seen: an earlier request of the window started as this one does
                if "+" in r["prompt_id"]:  # LEAD+OWN: LEAD began an earlier request
                    lead = r["prompt_id"].split("+")[0]
                    assert r["prefix_seen"] and any(q["prompt_id"].split("+")[0] == lead for q in mine[:i])
                else:
                    assert r["prefix_seen"] == any(p.startswith(prompts[i]) for p in prompts[:i]), r["request_id"]
            assert [r["prefix_seen"] for r in mine if r["role"] == "measured"] == [False, False, True, True, True,
                                                                                     True]
    report = json.loads((run_dir / "report.json").read_text())
    assert all(w["warning"] is None and w["distinct_prompts"] >= 16 for w in report["cost"]["workloads"])
