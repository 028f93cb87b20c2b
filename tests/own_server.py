"""A user's own OpenAI-compatible server, as tests run it (`engine: openai`): standard library only, so any
python3 runs it, with no engine installed. Deterministic: the completion and its logprobs follow from the
prompt. Strict, as a hand-written mock often is: a request field it does not know is answered with HTTP 400,
so an arm that sends an engine's extras (vLLM's return_token_ids) fails visibly.

    python3 tests/own_server.py --host 127.0.0.1 --port 8000 [--model NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIELDS = {"model", "prompt", "max_tokens", "temperature", "logprobs", "seed", "echo", "prompt_logprobs"}


def complete(body: dict[str, object], model: str) -> dict[str, object]:
    digest = hashlib.sha256(str(body["prompt"]).encode()).hexdigest()
    tokens = [f" w{digest[i % 32 * 2:i % 32 * 2 + 2]}" for i in range(int(str(body.get("max_tokens") or 16)))]
    k = int(str(body.get("logprobs") or 0))
    logprobs = {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens), "text_offset": list(range(len(tokens))),
                "top_logprobs": [{f"{token}{j}": -0.5 - j for j in range(k)} for token in tokens]} if k else None
    return {"object": "text_completion", "model": model,
            "choices": [{"index": 0, "text": "".join(tokens), "finish_reason": "length", "logprobs": logprobs}],
            "usage": {"prompt_tokens": len(str(body["prompt"]).split()), "completion_tokens": len(tokens)}}


def handler(model: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a concurrent batch warms its connections first
        # (run/wire/release.py)

        def _send(self, status: int, value: object) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path != "/v1/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
            elif unknown := sorted(set(body) - FIELDS):
                self._send(400, {"error": {"message": f"unknown fields: {', '.join(unknown)}"}})
            else:
                self._send(200, complete(body, model))

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="mine")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), handler(args.model))
    print(f"own server: model {args.model} on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
