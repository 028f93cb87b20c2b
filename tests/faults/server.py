"""A real HTTP server that misbehaves on purpose, for the fault suite (tests/e2e/test_faults.py): standard
library only, so it runs as a local process or in any Python image. vLLM-shaped where it behaves
(/health, /version, /v1/models, /v1/completions with logprobs).

    python3 server.py --port 8000 --mode MODE [--after N] [--hold-mb MB] [--pad-kb KB] [--delay-ms MS]
                      [--count-to FILE] [--digests]

Modes, for every completion after the first N good ones (default 0): ok, 500, garbage (not JSON),
truncated (JSON cut mid-body), hang (never answers), close (closes the connection without a word),
die (the process exits with status 7), oom (allocates --hold-mb MiB: under a memory limit the kernel
kills it). --delay-ms: each completion answered that much later; --count-to: a byte appended to FILE as each
completion arrives, so a test outside can stop the orchestrator at a chosen request (every start of every arm
appends to the same file; each digests request a "d"). --digests: the hooked engine's surface (engines/
transformers_hooked.py): an id in every answer, and GET /v1/digests/ID answers one module call's digest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMPLETION = {
    "id": "cmpl-fault", "object": "text_completion", "model": "reference",
    "choices": [{"index": 0, "text": " Paris", "finish_reason": "length",
                 "logprobs": {"tokens": [" Paris"], "token_logprobs": [-0.01], "text_offset": [0],
                              "top_logprobs": [{" Paris": -0.01, " Lyon": -4.6}]}}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--mode", default="ok")
    parser.add_argument("--after", type=int, default=0)
    parser.add_argument("--hold-mb", type=int, default=1024)
    parser.add_argument("--pad-kb", type=int, default=0)  # random text added to each answer: a big record
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--count-to", default=None)
    parser.add_argument("--digests", action="store_true")
    args, _ = parser.parse_known_args()
    served = {"n": 0}
    lock = threading.Lock()
    held: list[bytearray] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: object) -> None:
            print(f"INFO {self.address_string()} {format % a}", flush=True)

        def _send(self, status: int, body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)

        def _count(self, mark: bytes) -> None:
            if args.count_to:
                with open(args.count_to, "ab") as counted:
                    counted.write(mark)

        def do_GET(self) -> None:
            if args.digests and self.path.startswith("/v1/digests/"):
                self._count(b"d")
                time.sleep(args.delay_ms / 1000)
                rid = self.path.rsplit("/", 1)[1]
                call = [0, 0, "model.embed_tokens", "Embedding", 0, 4, 4, [1, 4], [1, 4, 8], "in", 1.0, 1.0, "out",
                        0.5, 0.25, 0.75, [0.125]]
                self._send(200, json.dumps({"request_id": rid, "calls": [call], "steps": [
                    {"step": 0, "batch_size": 1, "batch_request_ids": [rid], "context_tokens": 4}]}).encode())
            elif self.path == "/health":
                self._send(200, b"")
            elif self.path == "/version":
                self._send(200, b'{"version": "0.0.fault"}')
            elif self.path == "/v1/models":
                self._send(200, b'{"object": "list", "data": [{"id": "reference", "object": "model"}]}')
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                served["n"] += 1
                number, faulty = served["n"], served["n"] > args.after
                self._count(b".")
            time.sleep(args.delay_ms / 1000)
            mode = args.mode if faulty else "ok"
            completion = json.loads(json.dumps(COMPLETION))
            completion["choices"][0]["text"] += os.urandom(args.pad_kb * 512).hex()
            completion["id"] = f"cmpl-{number}"
            body = json.dumps(completion).encode()
            if mode == "ok":
                self._send(200, body)
            elif mode == "500":
                self._send(500, b'{"error": {"message": "EngineCore encountered an issue", "code": 500}}')
            elif mode == "garbage":
                self._send(200, b"<html>\x00\xff not json")
            elif mode == "truncated":
                self._send(200, body[: len(body) // 2])
            elif mode == "hang":
                time.sleep(3600)
            elif mode == "close":
                self.close_connection = True
                self.connection.shutdown(2)
            elif mode == "die":
                print("ERROR engine core died: fault injected", flush=True)
                os._exit(7)
            elif mode == "oom":
                print(f"INFO holding {args.hold_mb} MiB", flush=True)
                for _ in range(args.hold_mb):
                    held.append(bytearray(os.urandom(1 << 20)))
                self._send(200, body)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"INFO Starting vLLM-compatible server on http://{args.host}:{args.port} (mode {args.mode})", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
