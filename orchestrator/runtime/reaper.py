"""The reaper: a sidecar process that outlives the orchestrator and removes everything of its run once the
orchestrator is gone, however it went (kill -9, the OOM killer, a dropped SSH session), as testcontainers'
Ryuk does for containers.

The orchestrator starts it at the beginning of a run with a pipe on its stdin and keeps the write end open
for the run's lifetime. The kernel closes that end when the orchestrator exits for any reason, the reaper
reads end-of-file and removes every container and process labelled with the run id on every host the
run used. It runs in a session of its own, so Ctrl-C in the terminal does not reach it. After a clean run
there is nothing left to remove and it exits at once.

    python -m orchestrator.runtime.reaper '{"run_id": ..., "runtimes": [["docker", null], ["process", null]]}'
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO

from orchestrator.runtime.host import OWNER_HOST, OWNER_PID, owner_alive
from orchestrator.runtime.spec import LABEL_NS, Runtime, run_labels


class Reaper:
    """The owner's side: the pipe whose closing is the signal."""

    def __init__(self, run_id: str, runtimes: Iterable[tuple[str, str | None]], log_path: str | None = None) -> None:
        spec = json.dumps({"run_id": run_id, "runtimes": sorted(set(runtimes), key=str)})
        log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "orchestrator.runtime.reaper", spec],
                                          stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        assert self._proc.stdin is not None
        self._pipe: IO[bytes] | None = self._proc.stdin

    @property
    def pid(self) -> int:
        return self._proc.pid

    def release(self, wait_s: float = 0.0) -> None:
        """The run cleaned up after itself: close the pipe; the reaper checks once, in the background, and
        exits (`wait_s` to wait for it)."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=wait_s)


def reap(run_id: str, runtimes: Iterable[tuple[str, str | None]]) -> list[str]:
    """Remove every container and process of the run on every runtime and host; the names removed."""
    from orchestrator.runtime import make_runtime

    removed = []
    for kind, docker_host in runtimes:
        for attempt in range(3):  # a Docker host reached over a dropped link may come back
            try:
                removed += make_runtime(kind, docker_host=docker_host).cleanup(run_labels(run_id))
                break
            except Exception as exc:
                print(f"reaper: {kind} {docker_host or ''}: {exc}", file=sys.stderr)
                time.sleep(2 ** attempt)
    return removed


def clean(runtime: Runtime, run_id: str, other_hosts: bool) -> str:
    """`orchestrator clean`: remove what runs whose orchestrator is dead left behind, and say what was kept:
    a live run's, and (unless `other_hosts`) one started on another host, whose owner cannot be checked."""
    kept: list[str] = []

    def keep(labels: Mapping[str, str]) -> bool:
        alive = owner_alive(labels)
        if alive is False or (alive is None and other_hosts):
            return False
        owner = f"pid {labels.get(OWNER_PID)} is alive" if alive else f"started on {labels.get(OWNER_HOST)}"
        kept.append(f"{labels.get(f'{LABEL_NS}.run')}/{labels.get(f'{LABEL_NS}.arm', 'oneshot')} ({owner})")
        return True

    removed = runtime.cleanup(run_labels(run_id), keep)
    lines = [f"removed {len(removed)}{': ' + ', '.join(removed) if removed else ''}"]
    if kept:
        lines.append(f"kept {len(kept)} of live runs (or of other hosts: --other-hosts): {', '.join(kept)}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    while sys.stdin.buffer.read(65536):  # the owner never writes: this returns at its exit
        pass
    removed = reap(spec["run_id"], [tuple(e) for e in spec["runtimes"]])
    if removed:
        print(f"reaper: run {spec['run_id']}: removed {', '.join(removed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
