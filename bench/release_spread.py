"""Requests released together arrive together: measured where it matters, at the server.

    .venv/bin/python bench/release_spread.py --batch 64 256 --batches 20

A recording HTTP server runs in its own process (so its reading never competes with the sender in one
interpreter): a selector loop on non-blocking sockets with SO_TIMESTAMPNS, reading with recvmsg and keeping
the kernel's receive timestamp of the segment that completes each request (headers plus Content-Length body),
exact and independent of how fast the server reads. It holds every answer of a batch until all N of its
requests are complete, so every request counted was in flight together by construction; a request that comes
outside a batch, or a batch that never completes, is counted, never hidden. GET /health (the warm path) is
answered at once.

Three ways of sending the same batch of N identical POSTs, alternated batch by batch in one run:
  bare     one thread, a loop of `sendall` of prepared bytes on pre-connected, warmed sockets (the floor)
  threads  N threads behind a threading.Barrier, each with http.client on a warmed connection
  project  orchestrator.run.release.release(), exactly as protocol._release calls it
Spread = the last completion timestamp of a batch minus the first. Goal (issue 16): the project's worst
batch within 1.5x of the bare loop's worst, for every N, with 0 errors and every request in flight together.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it
BACKLOG = 4096
READ_BYTES = 65536
TIMEOUT_S = 30.0
PATH = "/v1/completions"
BODY = json.dumps({"model": "reference", "prompt": "The capital of France is", "max_tokens": 16,
                   "temperature": 0.0}, separators=(",", ":")).encode()
ANSWER = json.dumps({"id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "reference",
                     "choices": [{"index": 0, "text": " Paris.", "logprobs": None, "finish_reason": "length"}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}).encode()
GOAL_RATIO = 1.5


# --- the recording server (its own process: `release_spread.py --serve`) ---------------------------------

def _response(status: str, body: bytes, close: bool) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


class _Peer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.inbox, self.outbox, self.close_when_sent = sock, bytearray(), bytearray(), False


class _Recorder:
    """One batch at a time: `batch N` opens it (answered `ok`), `end` reports it as one JSON line."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # accepted sockets inherit it
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(BACKLOG)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "control")
        self.control = b""
        self._reset(0)

    def _reset(self, n: int) -> None:
        self.expected, self.errors, self.stray, self.untimed = n, 0, 0, 0
        self.stamps: list[int] = []  # per request of the batch: kernel receive time of its last byte
        self.held: list[_Peer] = []  # whose answers wait for the batch's last request

    def serve(self) -> None:
        print(self.listener.getsockname()[1], flush=True)
        while True:
            for key, events in self.selector.select():
                if key.data == "control":
                    if not self._command():
                        return
                elif key.data is None:
                    self._accept()
                elif events & selectors.EVENT_WRITE:
                    self._flush(key.data)
                else:
                    self._read(key.data)

    def _command(self) -> bool:
        chunk = os.read(sys.stdin.fileno(), 4096)
        if not chunk:
            return False  # the bench has gone
        self.control += chunk
        while b"\n" in self.control:
            line, self.control = self.control.split(b"\n", 1)
            word, *arg = line.decode().split()
            if word == "batch":
                self._reset(int(arg[0]))
                print("ok", flush=True)
            elif word == "end":
                stamps = self.stamps
                print(json.dumps({"recorded": len(stamps), "errors": self.errors, "stray": self.stray,
                                  "untimed": self.untimed,
                                  "spread_ns": max(stamps) - min(stamps) if stamps else None}), flush=True)
                self._answer_held(b"503 Service Unavailable")  # held still: the batch never completed
                self._reset(0)
        return True

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.selector.register(sock, selectors.EVENT_READ, _Peer(sock))

    def _read(self, peer: _Peer) -> None:
        try:
            data, ancillary, _, _ = peer.sock.recvmsg(READ_BYTES, socket.CMSG_SPACE(16))
        except BlockingIOError:
            return
        except OSError:
            self.errors += 1
            self._close(peer)
            return
        if not data:
            self.errors += bool(peer.inbox)  # closed in the middle of a request
            self._close(peer)
            return
        stamps = [struct.unpack("qq", payload[:16]) for level, kind, payload in ancillary
                  if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS]  # SCM_TIMESTAMPNS == SO_TIMESTAMPNS
        if stamps:
            received_ns = stamps[-1][0] * 1_000_000_000 + stamps[-1][1]
        else:
            self.untimed += 1
            received_ns = time.time_ns()
        peer.inbox += data
        while (request := self._take_request(peer)) is not None:
            if request == "GET":
                self._send(peer, _response("200 OK", b"", close=False))
            elif len(self.stamps) < self.expected:
                self.stamps.append(received_ns)
                self.held.append(peer)
                if len(self.stamps) == self.expected:
                    self._answer_held(b"200 OK")
            else:
                self.stray += 1  # outside any batch: not in flight with the others
                self._send(peer, _response("200 OK", ANSWER, close=True))

    @staticmethod
    def _take_request(peer: _Peer) -> str | None:
        """The method of the next whole request in the inbox (removed from it), or None if none is whole."""
        end = peer.inbox.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(peer.inbox[:end]).decode("latin-1").split("\r\n")
        length = next((int(line.split(":", 1)[1]) for line in head[1:]
                       if line.lower().startswith("content-length:")), 0)
        if len(peer.inbox) < end + 4 + length:
            return None
        del peer.inbox[:end + 4 + length]
        return head[0].split(" ", 1)[0]

    def _answer_held(self, status: bytes) -> None:
        for peer in self.held:
            self._send(peer, _response(status.decode(), ANSWER, close=True))
        self.held = []

    def _send(self, peer: _Peer, data: bytes) -> None:
        peer.outbox += data
        peer.close_when_sent = peer.close_when_sent or b"Connection: close" in data
        self._flush(peer)

    def _flush(self, peer: _Peer) -> None:
        try:
            del peer.outbox[:peer.sock.send(peer.outbox)]
        except BlockingIOError:
            pass
        except OSError:
            self.errors += 1
            self._close(peer)
            return
        if peer.outbox:
            self.selector.modify(peer.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, peer)
        elif peer.close_when_sent:
            self._close(peer)  # the server closes first: its side, not the bench's ports, holds TIME_WAIT
        else:
            self.selector.modify(peer.sock, selectors.EVENT_READ, peer)

    def _close(self, peer: _Peer) -> None:
        if peer.sock.fileno() >= 0:  # a held peer may have gone before its answer
            self.selector.unregister(peer.sock)
            peer.sock.close()


# --- the senders -----------------------------------------------------------------------------------------

def _post_bytes(port: int) -> bytes:
    return (f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n").encode() + BODY


def bare(port: int, n: int) -> int:
    """Pre-connected, warmed sockets; prepared bytes; one loop of sendall. Returns the failed requests."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) for _ in range(n)]
    try:
        for sock in socks:
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(b"\r\n\r\n"):  # the health answer has no body
                answer += sock.recv(READ_BYTES)
        payload = _post_bytes(port)
        for sock in socks:  # the release
            sock.sendall(payload)
        failed = 0
        for sock in socks:
            answer = b""
            while chunk := sock.recv(READ_BYTES):
                answer += chunk
            failed += not (answer.startswith(b"HTTP/1.1 200") and answer.endswith(ANSWER))
        return failed
    finally:
        for sock in socks:
            sock.close()


def threads(port: int, n: int) -> int:
    """N threads, each with http.client on a warmed connection, released by one Barrier."""
    barrier, lock, failed = threading.Barrier(n), threading.Lock(), [0]

    def one() -> None:
        conn, ok = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S), False
        try:
            conn.request("GET", "/health")
            conn.getresponse().read()
            barrier.wait(TIMEOUT_S)
            conn.request("POST", PATH, body=BODY, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            ok = response.status == 200 and response.read() == ANSWER
        except (OSError, http.client.HTTPException, threading.BrokenBarrierError):
            barrier.abort()
        finally:
            conn.close()
        if not ok:
            with lock:
                failed[0] += 1

    workers = [threading.Thread(target=one) for _ in range(n)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failed[0]


def project(port: int, n: int) -> int:
    """orchestrator.run.release.release() as protocol._release calls it; every answer parsed as a run would."""
    from orchestrator.engines import profile_for
    from orchestrator.run.wire import release  # here: the recording server (this file, --serve) needs none of it
    from orchestrator.run.wire.client import json_bytes

    async def batch() -> int:
        payloads = [(PATH, json_bytes(json.loads(BODY)))] * n
        exchanges = await asyncio.gather(*await release.release(f"http://127.0.0.1:{port}", "/health", payloads,
                                                                TIMEOUT_S))
        return sum(bool(e.error or not e.sent or profile_for(None).parse(e.body).error) for e in exchanges)

    return asyncio.run(batch())


METHODS: dict[str, Callable[[int, int], int]] = {"bare": bare, "threads": threads, "project": project}


@dataclass(frozen=True)
class Batch:
    method: str
    n: int
    recorded: int  # requests complete at the server, every one held until the batch's last
    spread_ns: int | None  # last completion timestamp - first (kernel receive timestamps)
    errors: int  # failed requests at the client plus broken connections at the server
    stray: int  # requests that came outside a batch: not in flight with the others
    untimed: int  # reads without a kernel timestamp (then the server's clock stood in)

    @property
    def together(self) -> bool:
        return self.recorded == self.n and self.stray == 0


class RecordingServer:
    def __enter__(self) -> RecordingServer:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.port = int(self._line())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the server ends when its control pipe does
        self.proc.wait(timeout=TIMEOUT_S)

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the recording server exited (status {self.proc.poll()})")
        return line

    def command(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._line()

    def measure(self, method: str, n: int) -> Batch:
        self.command(f"batch {n}")
        failed = METHODS[method](self.port, n)
        seen = json.loads(self.command("end"))
        return Batch(method, n, seen["recorded"], seen["spread_ns"], failed + seen["errors"], seen["stray"],
                     seen["untimed"])


def run(sizes: list[int], batches: int, methods: list[str]) -> list[Batch]:
    """Every method, batch by batch, in an order that rotates, so none always goes first."""
    out = []
    with RecordingServer() as server:
        for n in sizes:
            for b in range(batches):
                for i in range(len(methods)):
                    out.append(server.measure(methods[(b + i) % len(methods)], n))
    return out


def report(results: list[Batch], methods: list[str]) -> tuple[str, bool]:
    """The table, and whether the goal was met for every N (project worst <= 1.5x bare worst, 0 errors,
    every request in flight together)."""
    lines = [f"{'method':<8} {'N':>4} {'batches':>7} {'median ms':>10} {'p95 ms':>7} {'p99 ms':>7} "
             f"{'worst ms':>9} "
             f"{'>1 ms':>6} {'errors':>6} {'not together':>12} {'untimed':>7}"]
    worst: dict[tuple[str, int], float] = {}
    median: dict[tuple[str, int], float] = {}
    p99: dict[tuple[str, int], float] = {}
    clean: dict[int, bool] = {}
    for n in sorted({r.n for r in results}):
        for method in methods:
            rows = [r for r in results if r.method == method and r.n == n]
            spreads = [r.spread_ns for r in rows if r.spread_ns is not None] or [0]
            worst[method, n], median[method, n] = max(spreads), statistics.median(spreads)
            cuts = statistics.quantiles(spreads, n=100, method="inclusive") if len(spreads) > 1 else [spreads[0]] * 99
            p95, p99[method, n] = cuts[94], cuts[98]
            slow = sum(s > 1_000_000 for s in spreads)  # the tail: batches a scheduler hiccup stretched
            errors = sum(r.errors for r in rows)
            apart = sum(r.n - r.recorded + r.stray for r in rows)
            if method == "project":
                clean[n] = errors == 0 and apart == 0
            lines.append(f"{method:<8} {n:>4} {len(rows):>7} {median[method, n] / 1e6:>10.2f} {p95 / 1e6:>7.2f} "
                         f"{p99[method, n] / 1e6:>7.2f} "
                         f"{worst[method, n] / 1e6:>9.2f} {slow:>6} {errors:>6} {apart:>12} "
                         f"{sum(r.untimed for r in rows):>7}")
    met = True
    if "bare" in methods and "project" in methods:
        lines.append("")
        for n in sorted(clean):
            ratio = worst["project", n] / max(worst["bare", n], 1)
            ok = ratio <= GOAL_RATIO and clean[n]
            met = met and ok
            lines.append(f"N={n}: project/bare worst {ratio:.2f}x, median "
                         f"{median['project', n] / max(median['bare', n], 1):.2f}x, p99 "
                         f"{p99['project', n] / max(p99['bare', n], 1):.2f}x; goal (worst <= {GOAL_RATIO}x, "
                         f"0 errors, all together): {'met' if ok else 'NOT met'}")
    return "\n".join(lines), met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256], help="batch sizes N")
    parser.add_argument("--batches", type=int, default=20, help="batches per method and N")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the recording server
    args = parser.parse_args(argv)
    if args.serve:
        _Recorder().serve()
        return 0
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; spread = last - first kernel receive "
          "timestamp of a batch's requests at the server", flush=True)
    table, met = report(run(args.batch, args.batches, args.methods), args.methods)
    print(table)
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main())
