"""Contention while a probe repeats: a second process busy on the same device (a matmul loop on the GPU, on the
CPU a matmul over every core), or, on a GPU, a second CUDA stream of the probe's own process. Shipped with the
kernel probes and the script runner (`probes.bundle`); stdlib at import, torch only inside the busy loops.

The seed's probes ran "a single stream and an otherwise idle GPU": this is the other case. The busy process
prints "ready" once its first matmul ran, so the probe starts contended, and on SIGTERM the matmuls it ran.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

BUSY_PROCESS, BUSY_STREAM = "process", "stream"  # what contends: not a runtime's kind
KINDS = (BUSY_PROCESS, BUSY_STREAM)
SIZE = 1024  # the busy matmul's side on the CPU: long enough to occupy the cores, short enough to stop at once
GPU_SIZE = 4096  # on a GPU: a few ms of fp32 per matmul, every SM busy

# The busy process: `python -c BUSY DEVICE`. Without torch on the CPU, a Python loop on one core.
BUSY = f'''import os, signal, sys
done = [0]
def stop(*_):
    sys.stdout.write("matmuls %d\\n" % done[0]); sys.stdout.flush(); os._exit(0)
signal.signal(signal.SIGTERM, stop)
try:
    import torch
except ImportError:
    torch = None
device = sys.argv[1]
if torch is None:
    done[0] = 1
    print("ready", flush=True)
    while True:
        sum(i * i for i in range(10000)); done[0] += 1
if device == "cpu":
    torch.set_num_threads(os.cpu_count() or 1)
a = torch.randn(*(2 * [{SIZE} if device == "cpu" else {GPU_SIZE}]), device=device)
b = a @ a
done[0] = 1
print("ready", flush=True)
while True:
    b = a @ b.clamp_(-1, 1)
    if device != "cpu":
        torch.cuda.synchronize()
    done[0] += 1
'''


def check(kind: str | None, device: str) -> str | None:
    """What is wrong with contention `kind` on `device` (a problem line), or None."""
    if kind is None:
        return None
    if kind not in KINDS:
        return f"contend {kind!r} is not one of {list(KINDS)} (or null)"
    if kind == BUSY_STREAM and not device.startswith("cuda"):
        return f"contend 'stream' needs a CUDA device (device is {device}): use contend 'process' on the CPU"
    return None


@contextlib.contextmanager
def running(kind: str | None, device: str) -> Iterator[dict[str, Any]]:
    """Contention of `kind` on `device` while the block runs; yields the facts the probe records, filled in
    when the block ends: `contend` (the kind, or None) and `contend_matmuls` (what the busy side ran)."""
    facts: dict[str, Any] = {"contend": kind, "contend_matmuls": None}
    if kind is None:
        yield facts
    elif kind == BUSY_PROCESS:
        with _process(device, facts):
            yield facts
    else:
        with _stream(device, facts):
            yield facts


@contextlib.contextmanager
def _process(device: str, facts: dict[str, Any]) -> Iterator[None]:
    busy = subprocess.Popen([sys.executable, "-c", BUSY, device], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert busy.stdout is not None
        if busy.stdout.readline().strip() != "ready":  # it died: say why rather than probe uncontended
            raise RuntimeError(f"the contending process failed: {busy.communicate(timeout=30)[1].strip()[-400:]}")
        yield
    finally:
        if busy.poll() is None:
            busy.terminate()
        out, _ = busy.communicate(timeout=60)
        said = [ln for ln in out.splitlines() if ln.startswith("matmuls ")]
        facts["contend_matmuls"] = int(said[-1].split()[1]) if said else None


@contextlib.contextmanager
def _stream(device: str, facts: dict[str, Any]) -> Iterator[None]:
    import torch

    stop = threading.Event()
    done = [0]
    stream = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]

    def loop() -> None:
        with torch.cuda.stream(stream):
            a = torch.randn(GPU_SIZE, GPU_SIZE, device=device)
            b = a @ a
            while not stop.is_set():
                b = a @ b.clamp_(-1, 1)
                done[0] += 1
                if done[0] % 8 == 0:
                    stream.synchronize()  # a bounded queue; the GIL is free while it waits
            stream.synchronize()

    thread = threading.Thread(target=loop, name="contend-stream", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        facts["contend_matmuls"] = done[0]


def environ_device() -> str:
    """The device a script's contention goes on: the first GPU the process sees, else the CPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if visible != "" and torch.cuda.is_available() else "cpu"
