"""The fault suite's interruptions (issue 45 item 1): a study of every phase kind (tests/faults/conf/study/
every_phase.yaml: sequential, concurrent, a load point with a warm-up and windows, study.starts = 2; two arms, each
the faulty server answering well as a local process) stopped by Ctrl-C and by kill -9 at seeded points of each
phase kind and of the digest fetches after each phase (the cells' requests are flagged for their digests), then
`compare` and `show` on the interrupted record, then `run --resume`. Each resumed record must give the verdicts of
the same study run without a stop, with every request of the protocol once (none lost, none twice), its digests
whole, and every start of every arm."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import read_table
from tests.conftest import ROOT, orchestrator

STUDY = ["--config-dir", str(ROOT / "tests" / "faults" / "conf"), "study=every_phase"]
# What each arm's servers receive, in order: its cold request, 2 prompts x 3 sequential and their 6 digests, 2
# prompts x 2 batches of 3 concurrent and their 12 digests, the load point's warm-up of 4, 3 windows of 12 and
# their 12 probes' digests, then its later start's one request per prompt. Where each kind falls (1-based, within
# an arm; the digest fetches: after the sequential, concurrent or load phase):
KINDS = {"sequential": [(2, 7)], "concurrent": [(14, 25)], "load warm-up": [(38, 41)], "first load window": [(42, 53)],
         "later load window": [(54, 77)], "digest fetch": [(8, 13), (26, 37), (78, 89)], "later start": [(90, 91)]}
PER_ARM = 91
SIGNALS = {"Ctrl-C": signal.SIGINT, "kill -9": signal.SIGKILL}
rng = random.Random(45)  # the points: one per kind and signal, in either arm, the same in every run
POINTS = [(kind, how, rng.choice([0, PER_ARM]) + rng.randint(*rng.choice(KINDS[kind]))) for kind in KINDS
          for how in SIGNALS]


def _env(run_dir: Path) -> dict[str, str]:
    return {**os.environ, "FAULT_COUNT_TO": f"{run_dir}.count", "ORCHESTRATOR_PROCESS_DIR": f"{run_dir}.state"}


def _verdicts(run_dir: Path) -> dict[str, Any]:
    """What a report concludes, keyed so that the order its cells were read in does not matter."""
    report = json.loads((run_dir / "report.json").read_text())
    return {
        "cells": {(c["arm"], c["prompt_id"], c["phase"]): (c["n"], c["distinct_signatures"], c["divergent"],
                                                         c["errors"]) for c in report["cells"]},
        "pairs": {(p["arm_b"], p["prompt_id"], p["phase"]): p["verdict"] for p in report["pairs"]},
        "schedules": {(s["arm"], s["prompt_id"], s["phase_a"], s["phase_b"]): s["verdict"]
                      for s in report["schedules"]},
        # every request of the load point once, counted or kept out as warm-up (where the steady part starts
        # depends on the timings, which a stop and a resume change)
        "windows": {(p["arm"], p["load_point"]): p["requests"] + ((p.get("steady") or {}).get("requests_kept_out") or 0)
                    for p in report["cost"]["phases"]},
        "starts": {(r["arm"], r["start"]): r["status"]
                   for r in read_table(RunPaths(run_dir), "arms", ["arm", "start", "status"]).to_pylist()},
        "digests": _digests(run_dir),
    }


def _digests(run_dir: Path) -> dict[str, int]:
    """How many of the requests that count have their digests, each at its own attempt and whole (one call)."""
    paths = RunPaths(run_dir)
    rows = read_table(paths, "responses", ["request_id", "attempt", "role"]).to_pylist()
    flagged = {(r["request_id"], r["attempt"]) for r in rows if r["role"] == "measured"}
    calls = collections.Counter((r["request_id"], r["attempt"]) for r in read_table(
        paths, "digests", ["request_id", "attempt"]).to_pylist())
    return {"flagged": len(flagged), "with digests": len(flagged & set(calls)), "other": len(set(calls) - flagged),
            "calls not one": sum(n != 1 for n in calls.values())}


def _protocol_ids(run_dir: Path) -> collections.Counter[str]:
    """The request ids that count (latest attempt), but the cold request a resume adds per restarted arm."""
    rows = read_table(RunPaths(run_dir), "responses", ["request_id", "role"]).to_pylist()
    return collections.Counter(r["request_id"] for r in rows if not str(r["request_id"]).split("/")[-1].startswith("-"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("faults") / "whole"
    result = orchestrator("run", *STUDY, f"hydra.run.dir={run_dir}", env=_env(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert Path(f"{run_dir}.count").stat().st_size == 2 * PER_ARM  # the points above fall where they say
    return run_dir


def _interrupted(run_dir: Path, how: str, at: int) -> list[str]:
    """Stopped at the `at`-th completion, read, resumed: what went wrong (nothing: [])."""
    Path(f"{run_dir}.count").touch()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", *STUDY, f"hydra.run.dir={run_dir}"],
                            cwd=ROOT, env=_env(run_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while Path(f"{run_dir}.count").stat().st_size < at and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(SIGNALS[how])
    stderr = proc.communicate(timeout=120)[1]
    problems = [] if proc.returncode == (130 if how == "Ctrl-C" else -9) else [f"run exit {proc.returncode}: "
                                                                                f"{stderr[-800:]}"]
    compared = orchestrator("compare", str(run_dir))  # the interrupted record: read, its report made
    if compared.returncode in (1, 2) or not (run_dir / "report.json").is_file():
        problems.append(f"compare of the interrupted record: exit {compared.returncode}: {compared.stderr[-800:]}")
    shown = orchestrator("show", str(run_dir))
    if shown.returncode:
        problems.append(f"show of the interrupted record: exit {shown.returncode}: {shown.stderr[-800:]}")
    resumed = orchestrator("run", "--resume", str(run_dir), env=_env(run_dir))
    if resumed.returncode:
        problems.append(f"resume: exit {resumed.returncode}: {resumed.stderr[-800:]}")
    for verb in ("compare", "show"):  # the resumed record
        again = orchestrator(verb, str(run_dir))
        if again.returncode:
            problems.append(f"{verb} of the resumed record: exit {again.returncode}: {again.stderr[-800:]}")
    raw = pq.read_table(run_dir / "data" / "responses", columns=["request_id", "attempt"]).to_pylist()
    doubled = [k for k, n in collections.Counter((r["request_id"], r["attempt"]) for r in raw).items() if n > 1]
    if doubled:
        problems.append(f"rows written twice: {doubled[:5]}")
    return problems


def test_every_phase_kind_interrupted_and_resumed_gives_the_uninterrupted_verdicts(uninterrupted: Path) -> None:
    expected, ids = _verdicts(uninterrupted), _protocol_ids(uninterrupted)
    assert set(ids.values()) == {1} and expected["starts"] == {(a, s): "completed" for a in ("baseline", "wide_batch")
                                                             for s in (0, 1)}
    runs = {f"{how} in {kind} at completion {at}": uninterrupted.parent / f"{kind.replace(' ', '_')}-{how[-2:]}"
            for kind, how, at in POINTS}
    with ThreadPoolExecutor(max_workers=4) as pool:  # each run its own processes, ports and dirs
        found = dict(zip(runs, pool.map(_interrupted, runs.values(), [h for _, h, _ in POINTS],
                                        [at for _, _, at in POINTS]), strict=True))
    for point, run_dir in runs.items():
        if not (run_dir / "report.json").is_file():
            continue
        if (got := _protocol_ids(run_dir)) != ids:
            found[point].append(f"requests lost {sorted(ids - got)[:5]}, or extra {sorted(got - ids)[:5]}")
        if (verdicts := _verdicts(run_dir)) != expected:
            found[point].append(f"verdicts differ: {[k for k in expected if verdicts[k] != expected[k]]}")
    failed = {point: problems for point, problems in found.items() if problems}
    assert not failed, "\n".join(f"{point}: {'; '.join(problems)}" for point, problems in failed.items())
