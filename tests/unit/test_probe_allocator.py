"""The allocator perturbation proven, and probes under contention: each repeat's output address is recorded
(`out_ptrs`); with `perturb_allocator` no repeat's output takes the previous repeat's address, and without it
the allocator does replay addresses (so the first assertion could fail: a no-op perturbation fails it). A
contended probe records the busy process and what it ran; a stream needs a GPU."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from typing import Any

import pytest

from orchestrator import probes

pytest.importorskip("torch")

GEMM = {"shapes": {"tiny": [256, 256]}, "m": [1, 8], "repeats": 30, "hash_repeats": 1, "device": "cpu",
        "arms": ["bf16", "fp32"]}
OPS = {"ops": {"norm": {"op": "rmsnorm", "hidden": 256}, "lsm": {"op": "log_softmax_topk"}}, "m": [1, 8],
       "repeats": 30, "hash_repeats": 1, "device": "cpu"}


def cells(probe: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-c", probes.bundle(probe), "--spec", json.dumps(spec)],
                          capture_output=True, text=True, timeout=600, cwd="/")  # as shipped: no checkout
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def replayed(pointers: list[int]) -> int:
    """Repeats whose output took the previous repeat's address (the first call's output stays alive)."""
    return sum(a == b for a, b in itertools.pairwise(pointers[1:]))


@pytest.mark.parametrize(("probe", "spec"), [("gemm", GEMM), ("ops", OPS)])
def test_the_perturbation_gives_every_repeat_a_new_address(probe: str, spec: dict[str, Any]) -> None:
    ran = [c for c in cells(probe, {**spec, "perturb_allocator": True}) if c["kind"] == "cell"]
    assert ran and all(len(c["out_ptrs"]) == 30 for c in ran)
    assert all(replayed(c["out_ptrs"]) == 0 for c in ran), [c["out_ptrs"] for c in ran]
    assert all(c["out_ptrs_distinct"] == len(set(c["out_ptrs"])) > 2 for c in ran)


@pytest.mark.parametrize(("probe", "spec"), [("gemm", GEMM), ("ops", OPS)])
def test_without_the_perturbation_the_allocator_replays_addresses(probe: str, spec: dict[str, Any]) -> None:
    """The control: the same probe unperturbed reuses the previous output's address (in most cells: glibc's
    malloc on the CPU, not always in each), so the test above would fail if the perturbation did nothing."""
    ran = [c for c in cells(probe, {**spec, "perturb_allocator": False}) if c["kind"] == "cell"]
    assert ran and sum(replayed(c["out_ptrs"]) for c in ran) > 0, [c["out_ptrs"] for c in ran]


def test_a_contended_probe_records_the_busy_process() -> None:
    rows = cells("gemm", {**GEMM, "arms": ["bf16"], "m": [8], "repeats": 4, "contend": "process"})
    ran = [r for r in rows if r["kind"] == "cell"]
    assert ran and all(c["contend"] == "process" and c["distinct_digests"] == 1 for c in ran)
    assert rows[-1]["kind"] == "done" and rows[-1]["contend"] == "process" and rows[-1]["contend_matmuls"] >= 1
    alone = cells("gemm", {**GEMM, "arms": ["bf16"], "m": [8], "repeats": 2})
    assert alone[-1]["contend"] is None and alone[-1]["contend_matmuls"] is None


def test_a_stream_on_the_cpu_is_refused_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-c", probes.bundle("ops"), "--spec",
                           json.dumps({**OPS, "contend": "stream"})], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "contend 'stream' needs a CUDA device" in done.stderr and not done.stdout
