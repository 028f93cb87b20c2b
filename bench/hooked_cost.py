"""What the hooked engine's digests cost (issues 39 and 48), alternated round by round in one process:
- requests that are not flagged, on the hooked engine, against the same engine started with `--no-digests` (no
  hooks can ever be attached): the same load, none flagged (the goal: at least 0.95);
- the price of looking: with one request in every FLAG_EVERY flagged, the speed of its batch-mates (the batch's
  tokens a second: every request of a static batch runs at the batch's pace; the goal: at least 0.9), and the
  others' share of the throughput (at most 1 - 1/FLAG_EVERY: the flagged requests' own tokens are not counted);
- each figure also per second of the engine process's CPU time (user + system, from /proc): on a shared machine
  whose other work slows the engine down, the CPU it spends on the same tokens is the steadier measure;
- the size of one flagged request's digests as the record stores them (Parquet, zstd), 64 tokens of an 8-layer
  model (the goal: under 1 MB).

    .venv/bin/python bench/hooked_cost.py                 # 3 rounds, 8 clients, 64 tokens
    .venv/bin/python bench/hooked_cost.py --rounds 5 --flag-every 4
    python3 bench/hooked_cost.py --engine-python python3 --device cuda --base-model DIR/tiny-llama   # on a GPU box
    .venv/bin/python bench/hooked_cost.py --digest-depth 3     # the decoder layers only (docs/locate.md)
    .venv/bin/python bench/hooked_cost.py --digest-under model.layers.0     # one layer's modules

The engine runs as a process in the transformers-serve venv (`make transformers-serve`), on an 8-layer copy of
tiny-llama's config (hidden 256, random weights from a fixed seed) made in a temporary folder; the clients are
threads here, each with its own keep-alive connection. The engine's CPU and this process share the machine's
cores: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.record.schemas import DIGESTS
from orchestrator.run.send.digests import digest_rows

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR") or Path.home() / ".cache" / "orchestrator")
PYTHON = CACHE / "transformers-serve-5.25.0" / "venv" / "bin" / "python"
TINY = CACHE / "models" / "tiny-llama"
PROMPTS = ["The capital of France is", "Count from one to ten: one, two,", "hello world the model is",
           "what is the answer to the question"]

MAKE_MODEL = r'''
import sys, shutil, torch
from dataclasses import dataclass
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
src, out = Path(sys.argv[1]), Path(sys.argv[2])
cfg = AutoConfig.from_pretrained(src)
cfg.num_hidden_layers = 8
torch.manual_seed(0)
AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
for f in src.iterdir():
    if f.name.startswith(("tokenizer", "special_tokens")):
        shutil.copy(f, out / f.name)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_engine(python: Path, device: str, model: Path, port: int, *flags: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}/arms/transformers-hooked:{ROOT}/arms/reference-engine",
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([str(python), "-m", "hookedengine", "--model", str(model), "--port", str(port),
                             "--device", device, "--max-num-seqs", "16", "--log-level", "WARNING", *flags], env=env)
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the hooked engine did not start")


def post(conn: http.client.HTTPConnection, body: dict[str, object]) -> dict[str, object]:
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return json.loads(conn.getresponse().read())  # type: ignore[no-any-return]


@dataclass
class Round:
    tokens: int  # every request's
    others: int  # the tokens of the requests that were not flagged
    flagged: int
    elapsed_s: float
    cpu_s: float  # the engine process's

    def speed(self, per_cpu: bool) -> float:
        """Tokens a second (of wall time, or of the engine's CPU time)."""
        return self.tokens / (self.cpu_s if per_cpu else self.elapsed_s)


def cpu_s(pid: int) -> float:
    """A process's CPU time so far, user + system (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_round(engine: subprocess.Popen[bytes], port: int, clients: int, requests: int, tokens: int,
               flag_every: int) -> Round:
    """`clients` threads send `requests` requests in all, every `flag_every`-th flagged (0: none)."""
    counter = iter(range(requests))
    lock = threading.Lock()
    done_tokens: list[tuple[bool, int]] = []

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            flag = bool(flag_every) and i % flag_every == 0
            answer = post(conn, {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": tokens, "temperature": 0,
                                 "ignore_eos": True, "logprobs": 5, "digest": flag})
            with lock:
                done_tokens.append((flag, answer["usage"]["completion_tokens"]))  # type: ignore[index]

    threads = [threading.Thread(target=client) for _ in range(clients)]
    cpu0, start = cpu_s(engine.pid), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - start, cpu_s(engine.pid) - cpu0
    return Round(sum(n for _f, n in done_tokens), sum(n for f, n in done_tokens if not f),
                 sum(f for f, _n in done_tokens), elapsed, cpu)


def digest_size(port: int, tokens: int) -> tuple[int, int, int]:
    """(Parquet bytes, rows, JSON bytes) of one flagged request's digests, alone, `tokens` tokens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    answer = post(conn, {"prompt": PROMPTS[0], "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
                         "logprobs": 5, "digest": True})
    conn.request("GET", f"/v1/digests/{answer['id']}")
    raw = conn.getresponse().read()
    base = {"study": "bench", "run_id": "bench", "arm": "hooked", "request_id": "r0", "attempt": 0}
    rows = list(digest_rows(json.loads(raw), base))
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=DIGESTS), sink, compression="zstd")
    return len(sink.getvalue()), len(rows), len(raw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--flag-every", type=int, default=8)
    ap.add_argument("--engine-python", type=Path, default=PYTHON, help="the engine's interpreter (%(default)s)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="the engine's device (cuda: bf16)")
    ap.add_argument("--base-model", type=Path, default=TINY, help="config and tokenizer copied (default: %(default)s)")
    ap.add_argument("--digest-depth", type=int, default=0,
                    help="the digested engine's --digest-depth (3: the decoder layers; default 0: every module)")
    ap.add_argument("--digest-under", default=None, metavar="MODULE",
                    help="the digested engine's --digest-under (e.g. model.layers.0; default: the whole model)")
    args = ap.parse_args()
    python = args.engine_python if "/" in str(args.engine_python) else Path(shutil.which(args.engine_python) or "")
    if not python.is_file() or not args.base_model.exists():
        print(f"needs {args.engine_python} and {args.base_model}: run `make transformers-serve` first", file=sys.stderr)
        return 2
    limits = (f"modules of depth {args.digest_depth} at most" if args.digest_depth else "",
              f"modules in {args.digest_under}" if args.digest_under else "")
    scope = ", ".join(s for s in limits if s) or "every module"
    print(f"digests of {scope}; load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "llama-8-layers"
        subprocess.run([str(python), "-c", MAKE_MODEL, str(args.base_model), str(model)], check=True,
                       capture_output=True)
        port, bare_port = free_port(), free_port()
        scoped = ("--digest-under", args.digest_under) if args.digest_under else ()
        proc = start_engine(python, args.device, model, port, "--digest-depth", str(args.digest_depth), *scoped)
        bare = start_engine(python, args.device, model, bare_port, "--no-digests")
        try:
            for e, p in ((proc, port), (bare, bare_port)):
                load_round(e, p, args.clients, args.clients, 8, 0)  # warm-up
            rounds: list[tuple[Round, Round, Round]] = []
            for r in range(args.rounds):
                a = load_round(bare, bare_port, args.clients, args.requests, args.tokens, 0)
                b = load_round(proc, port, args.clients, args.requests, args.tokens, 0)
                c = load_round(proc, port, args.clients, args.requests, args.tokens, args.flag_every)
                rounds.append((a, b, c))
                print(f"round {r + 1}: --no-digests {a.speed(False):.1f} tok/s ({a.speed(True):.1f} per CPU s); "
                      f"hooked engine, none flagged {b.speed(False):.1f} (x{b.speed(False) / a.speed(False):.3f}; "
                      f"per CPU s x{b.speed(True) / a.speed(True):.3f}); 1 in {args.flag_every} flagged "
                      f"({c.flagged}): all {c.speed(False):.1f} tok/s (x{c.speed(False) / a.speed(False):.3f}; "
                      f"per CPU s x{c.speed(True) / a.speed(True):.3f}), the others' share "
                      f"x{c.others / c.elapsed_s / a.speed(False):.3f}", flush=True)
            size, rows, raw = digest_size(port, args.tokens)
        finally:
            for e in (proc, bare):
                e.terminate()
                e.wait(30)

    def median(which: int, per_cpu: bool) -> float:
        return statistics.median(r[which].speed(per_cpu) / r[0].speed(per_cpu) for r in rounds)

    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"requests not flagged, against the engine with --no-digests (median of {args.rounds} rounds): "
          f"x{median(1, False):.3f}, per CPU second x{median(1, True):.3f} (goal: at least 0.95)")
    print(f"with 1 in {args.flag_every} flagged, a flagged request's batch-mates (the batch's tokens a second): "
          f"x{median(2, False):.3f}, per CPU second x{median(2, True):.3f} (goal: at least 0.9); the others' share "
          f"of the throughput x{statistics.median(c.others / c.elapsed_s / a.speed(False) for a, _b, c in rounds):.3f}")
    print(f"one flagged request, {args.tokens} tokens, 8 layers, {scope}: {rows} digest rows, {size / 1e6:.3f} MB in "
          f"Parquet (zstd; goal: under 1 MB), {raw / 1e6:.2f} MB as the engine's JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
