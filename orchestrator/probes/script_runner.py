"""Runs a user's own probe script, unmodified, inside an arm's image or interpreter (stdlib only; torch only for
the contention, contend.py): `orchestrator probe --script FILE` ships this runner bundled (`probes.bundle`)
with the script's text in its spec, so nothing of the host is mounted.

It writes the script, read-only, under a fresh temporary folder of the image (the file keeps its name; the folder
is removed afterwards), and
runs `python3 FILE` (the interpreter this runner runs under: the arm's) `repeats` times, each a fresh process
with the arm's environment and the image's working directory, optionally while a second process is busy on
the same device. It prints one JSON line per run: {"kind": "run", "repeat", "exit_code", "wall_s", "stdout",
"stderr_tail"}, then {"kind": "done", "contend", "contend_matmuls"}. The digests are read from the stdout on
the orchestrator's side (run/script_probe.py).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any

from orchestrator.probes import contend

STDERR_TAIL_CHARS = 4000
READ_ONLY_DIR = stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="script_runner.py")
    parser.add_argument("--spec", required=True, help='JSON: {"name", "source_z64", "repeats", "timeout_s", '
                        '"contend"}')
    spec: dict[str, Any] = json.loads(parser.parse_args(sys.argv[1:] if argv is None else argv).spec)
    folder = tempfile.mkdtemp(prefix="user-probe-")
    try:
        path = os.path.join(folder, os.path.basename(spec["name"]))
        with open(path, "wb") as handle:
            handle.write(zlib.decompress(base64.b64decode(spec["source_z64"])))
        os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)  # read-only: the script runs as it was given
        os.chmod(folder, READ_ONLY_DIR)
        with contend.running(spec.get("contend"), contend.environ_device()) as contention:
            for repeat in range(1, int(spec["repeats"]) + 1):
                _emit({"kind": "run", "repeat": repeat, **_run(path, float(spec["timeout_s"]))})
        _emit({"kind": "done", **contention})
    finally:  # as a local process this is the host's temporary folder: leave nothing there
        os.chmod(folder, stat.S_IRWXU)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def _run(path: str, timeout_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, path], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:  # recorded as a run that did not finish, not a crash of the runner
        code, out = -9, exc.stdout or b""
        err = (exc.stderr or b"") + f"\n[killed after {timeout_s:.0f} s]".encode()
    return {"exit_code": code, "wall_s": time.perf_counter() - started, "stdout": out.decode("utf-8", "replace"),
            "stderr_tail": err.decode("utf-8", "replace")[-STDERR_TAIL_CHARS:]}


def _emit(row: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
