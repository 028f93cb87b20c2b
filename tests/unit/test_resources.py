"""Memory peaks: the sampler keeps the highest reading of each source and says why one is not observable; the
readings themselves (a process tree from /proc, nvidia-smi's lines)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from orchestrator.errors import RuntimeFailure
from orchestrator.run.arm.resources import MemorySampler
from orchestrator.runtime.fake import FakeRuntime, FakeServer
from orchestrator.runtime.memory import parse_gpu_memory, process_tree_memory
from orchestrator.runtime.spec import ContainerSpec, Handle

MIB = 1 << 20


def started(memory_bytes: int | None) -> tuple[FakeRuntime, Handle, FakeServer]:
    server = FakeServer(handler=lambda request: None, memory_bytes=memory_bytes)  # type: ignore[arg-type,return-value]
    runtime = FakeRuntime({"img": lambda spec: server})
    return runtime, runtime.start(ContainerSpec("arm", "img", [], {}, {}, {}, 8000)), server


def test_the_sampler_keeps_the_highest_reading_and_takes_a_last_one_at_stop() -> None:
    runtime, handle, server = started(10 * MIB)
    sampler = MemorySampler(runtime, handle, gpus="0", interval_s=0.01).start()
    server.memory_bytes = 300 * MIB
    time.sleep(0.1)
    server.memory_bytes = 20 * MIB  # freed: the peak stays
    runtime.gpu_memory_bytes = 7 * MIB
    peaks = sampler.stop()
    assert peaks.peak_memory_bytes == 300 * MIB and peaks.peak_gpu_memory_bytes == 7 * MIB
    assert peaks.memory_note == "memory: fake, every 0.01 s; GPU memory: fake"


def test_what_cannot_be_read_is_null_with_why() -> None:
    runtime, handle, _ = started(None)
    peaks = MemorySampler(runtime, handle, gpus="all", interval_s=0.01).start().stop()
    assert peaks.row() == {"peak_memory_bytes": None, "peak_gpu_memory_bytes": None, "memory_note":
                           "memory: not observable (the fake server states no memory), every 0.01 s; "
                           "GPU memory: not observable (the fake runtime states no GPU memory)"}
    no_gpus = MemorySampler(runtime, handle, gpus=None, interval_s=0.01).start().stop()
    assert no_gpus.peak_gpu_memory_bytes is None and "GPU memory: none, the arm has no GPUs" in no_gpus.memory_note


def test_a_process_tree_counts_its_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(200 << 20); import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and process_tree_memory(child.pid).bytes < 200 * MIB:
            time.sleep(0.1)  # until the child has touched its 200 MiB
        alone = process_tree_memory(child.pid).bytes
        assert alone >= 200 * MIB  # the child's 200 MiB, touched
        assert process_tree_memory(os.getpid()).bytes >= alone  # this process's tree holds the child
    finally:
        child.kill()
        child.wait()
    with pytest.raises(RuntimeFailure, match="has exited"):
        process_tree_memory(child.pid)


def test_nvidia_smi_lines_are_summed_over_the_gpus_named() -> None:
    csv = "0, GPU-aaa, 1000\n1, GPU-bbb, 250\n2, GPU-ccc, 5\n"
    assert parse_gpu_memory(csv, "all") == 1255 * MIB
    assert parse_gpu_memory(csv, "0,2") == 1005 * MIB
    assert parse_gpu_memory(csv, "GPU-bbb") == 250 * MIB
    with pytest.raises(RuntimeFailure, match="none of the GPUs 7"):
        parse_gpu_memory(csv, "7")
