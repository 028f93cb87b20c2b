"""Run the reference engine as a local process (no Docker) on this machine's device and report, per
mechanism setting, distinct top-logprob signatures for sequential and concurrent identical requests.

    PYTHONPATH=.:arms/reference-engine python3 bench/gpu_engine_check.py [--device cuda]

Standard library + torch only on the engine side; the signatures are the orchestrator's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchestrator.analysis.signatures import top_logprobs_signature
from orchestrator.engines import profile_for

parse_completion = profile_for(None).parse  # a body in the default engine's dialect

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {
    "all off": [],
    "fused finalize": ["--fused-finalize"],
    "batch invariance off": ["--no-batch-invariant"],
    "top-k random, budget 64": ["--topk-tiebreak", "random", "--indexer-budget", "64"],
    "autotune, fresh cache": ["--autotune-cache-dir"],  # a fresh temporary dir is appended
}
PROMPT = ("The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is Madrid. "
          "The capital of Portugal is")  # 120 bytes: above the small indexer budget


def post(port: int, body: dict) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


def signature(raw: bytes) -> str | None:
    return top_logprobs_signature(parse_completion(raw).top_logprobs)


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"engine exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("engine not ready")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "arms" / "reference-engine")}
    body = {"model": "reference", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
            "logprobs": 20}
    for offset, (name, flags) in enumerate(SETTINGS.items()):
        port = 18200 + offset
        if flags[-1:] == ["--autotune-cache-dir"]:
            flags = [*flags, tempfile.mkdtemp(prefix="autotune-")]
        proc = subprocess.Popen([sys.executable, "-m", "refengine", "--served-model-name", "reference",
                                 "--device", args.device, "--port", str(port), "--host", "127.0.0.1", *flags],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_ready(port, proc)
            started = time.monotonic()
            sequential = [signature(post(port, body)) for _ in range(args.repeats)]
            with ThreadPoolExecutor(args.repeats) as pool:
                concurrent = [signature(r) for r in pool.map(post, [port] * args.repeats, [body] * args.repeats)]
            elapsed = time.monotonic() - started
        finally:
            proc.terminate()
            log = proc.communicate(timeout=30)[0]
        device_line = next((line for line in log.splitlines() if "refengine version" in line), "")
        print(f"{name:22s} sequential {len(set(sequential))} distinct in {len(sequential)}; "
              f"concurrent {len(set(concurrent))} in {len(concurrent)}; "
              f"seq vs conc {'identical' if set(sequential) == set(concurrent) else 'differ'}; "
              f"cold {'matches' if sequential[0] in sequential[1:] else 'differs from'} warm; "
              f"{elapsed:.1f} s | {device_line.split('] ', 1)[-1]}", flush=True)


if __name__ == "__main__":
    main()
