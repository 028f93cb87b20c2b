"""The real HTTP server: in-process on a free port, and as `python -m refengine` (logs, SIGTERM)."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from engines import prompt_ids
from refengine.config import EngineConfig
from refengine.server import build_app, make_server, serve_in_thread

ENGINE_ROOT = Path(__file__).resolve().parents[2] / "arms" / "reference-engine"


def _get(base: str, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.status, r.read()


def _post(base: str, body: object) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + "/v1/completions", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def base():
    cfg = EngineConfig(model="/models/tiny", served_model_name="tiny", max_model_len=1024, batch_window_ms=200)
    app = build_app(cfg, log_startup=False)
    server = make_server(app, "127.0.0.1", 0)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    app.scheduler.stop()


def test_health_models_version(base) -> None:
    assert _get(base, "/health") == (200, b"")
    _, body = _get(base, "/v1/models")
    models = json.loads(body)
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "tiny" and models["data"][0]["root"] == "/models/tiny"
    assert models["data"][0]["max_model_len"] == 1024
    assert json.loads(_get(base, "/version")[1]) == {"version": "0.1.0"}


def test_completion_and_errors(base) -> None:
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 20}
    status, r = _post(base, body)
    assert status == 200 and r["usage"]["completion_tokens"] == 4
    assert len(r["choices"][0]["logprobs"]["top_logprobs"][0]) <= 21
    assert _post(base, body)[1]["choices"][0]["logprobs"] == r["choices"][0]["logprobs"]
    status, err = _post(base, {**body, "logprobs": 25})
    assert status == 400 and err["error"]["message"].startswith("Requested sample logprobs of 25")
    assert _post(base, {**body, "model": "nope"})[0] == 404
    status, err = _post(base, b"{not json")
    assert status == 400 and err["error"]["type"] == "BadRequestError"


def test_concurrent_requests_are_batched_and_identical(base) -> None:
    body = {"model": "tiny", "prompt": prompt_ids(40), "max_tokens": 4, "temperature": 0, "logprobs": 5}
    out: list[dict] = []
    threads = [threading.Thread(target=lambda: out.append(_post(base, body)[1])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == 4 and len({json.dumps(r["choices"][0]["logprobs"]) for r in out}) == 1
    metrics = _get(base, "/metrics")[1].decode()
    sizes = {int(m) for m in re.findall(r'refengine:batch_size_total\{size="(\d+)"\}', metrics)}
    assert max(sizes) >= 2
    assert re.search(r'vllm:num_requests_waiting\{model_name="tiny",engine="0"\} 0', metrics)
    # The trace proves it per request: the ones batched together ran in the same engine steps.
    traces = [r["engine_trace"] for r in out]
    assert all(t["arrival_ns"] > 0 and t["last_step"] - t["first_step"] == 4 for t in traces)  # prefill + 4
    assert max(sum(t["first_step"] == u["first_step"] for u in traces) for t in traces) == max(sizes)


def _listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (TcpExtListenOverflows)."""
    lines = [line.split() for line in Path("/proc/net/netstat").read_text().splitlines() if line.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1], strict=True))["ListenOverflows"])


def test_a_whole_batch_of_connections_is_accepted(base) -> None:
    """256 connections opened at once: none dropped by a full listen queue, each answered."""
    host, port = base.removeprefix("http://").split(":")
    before = _listen_overflows()
    socks = [socket.socket() for _ in range(256)]
    try:
        for s in socks:
            s.setblocking(False)
            assert s.connect_ex((host, int(port))) in (0, errno.EINPROGRESS)
        for s in socks:
            s.setblocking(True)
            s.settimeout(30)
            s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        answers = [s.recv(1024) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 256
    assert _listen_overflows() == before


def test_process_startup_logs_and_sigterm(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ENGINE_ROOT), "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": str(tmp_path)}
    env.pop("VLLM_BATCH_INVARIANT", None)
    env.pop("REFENGINE_FUSED_FINALIZE", None)
    cmd = [sys.executable, "-m", "refengine", "tiny", "--host", "127.0.0.1", "--port", "0", "--max-model-len",
           "512", "--gpu-memory-utilization", "0.85", "--no-such-flag"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "server exited early:\n" + "".join(lines)
            lines.append(line)
            if "Starting vLLM-compatible server on" in line:
                break
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", lines[-1]).group(1))
        assert _get(f"http://127.0.0.1:{port}", "/health")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(15)
        lines += proc.stdout.readlines()
    assert rc == 0
    log = "".join(lines)
    line_re = r"^(INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[\w+\.py:\d+\] "
    assert all(re.match(line_re, ln) for ln in lines if ln.strip())
    for pattern in (
        r"refengine version 0\.1\.0, torch \S+, device cpu, dtype float32",
        r"non-default args: \{.*'model': 'tiny'",
        r"Using 'FLASHINFER_CUTLASS' Unquantized MoE backend out of potential backends: "
        r"\['FLASHINFER_CUTLASS', 'TRITON', 'CUTLASS'\]",
        r"MoE backend requested: auto",
        r"Fused finalize: off",
        r"Batch invariant: on",
        r"Batch window: 20 ms",
        r"Indexer budget: 2048, top-k tie-break: stable",
        r"Autotune cache key: [0-9a-f]{16} \(legacy key: no\)",
        r"Autotune cache miss: will tune on first request",
        r"Ignoring unsupported flag\(s\): --gpu-memory-utilization 0\.85",
        r"Ignoring unknown flag\(s\): --no-such-flag",
    ):
        assert re.search(pattern, log), pattern
