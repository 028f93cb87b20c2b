"""HTTP front end (stdlib ThreadingHTTPServer) and the wiring of model, tuner, engine, scheduler."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from refengine import __version__, paths, protocol, streaming
from refengine.autotune import Autotuner
from refengine.config import EngineConfig
from refengine.engine import Engine
from refengine.metrics import Metrics
from refengine.model import TinyMoE
from refengine.scheduler import BatchRunner, Scheduler
from refengine.tokenizer import BYTES, Tokenizer

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 600.0
# The listen backlog: a whole batch of connections opened at once must queue, not be dropped. With the
# standard library's 5, connections past the fifth waited ~1 s for the kernel's SYN retransmit, or failed.
# The kernel caps it at net.core.somaxconn (4096 by default).
LISTEN_BACKLOG = 4096


def resolve_device(cfg: EngineConfig) -> tuple[torch.device, torch.dtype, str]:
    """(device, dtype, description). bf16 on CUDA unless --dtype float32; fp32 on CPU."""
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if want_cuda:
        device = torch.device("cuda:0")
        desc = f"cuda:0 ({torch.cuda.get_device_name(0)})"
        dtype = torch.float32 if cfg.dtype == "float32" else torch.bfloat16
    else:
        device = torch.device("cpu")
        desc = "cpu"
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
    return device, dtype, desc


# A GET route of an engine built on this server: the path's rest after the route's prefix -> (status, JSON body).
Route = Callable[[str], tuple[int, Any]]


@dataclass
class App:
    cfg: EngineConfig
    engine: BatchRunner
    scheduler: Scheduler
    metrics: Metrics
    tokenizer: Tokenizer = BYTES
    owner: str = "refengine"  # /v1/models' owned_by
    version: str = __version__
    routes: Mapping[str, Route] = field(default_factory=dict)  # GET path prefix -> its handler
    # POST /reset_prefix_cache: empties the prefix cache, returns the blocks it held (0 with the cache off);
    # None: no such route (an engine without a prefix cache)
    reset_prefix_cache: Callable[[], int] | None = None


def build_app(cfg: EngineConfig, log_startup: bool = True) -> App:
    device, dtype, desc = resolve_device(cfg)
    if log_startup:
        logger.info(
            "refengine version %s, torch %s, device %s, dtype %s",
            __version__, torch.__version__, desc, str(dtype).removeprefix("torch."),
        )
        logger.info("Using max model len %d", cfg.max_model_len)
        logger.info("MoE backend requested: %s", cfg.moe_backend)
        logger.info(
            "Using '%s' Unquantized MoE backend out of potential backends: "
            "['FLASHINFER_CUTLASS', 'TRITON', 'CUTLASS']",
            cfg.resolved_backend.upper(),
        )
        logger.info("Fused finalize: %s", "on" if cfg.fused_finalize else "off")
        logger.info("Batch invariant: %s", "on" if cfg.batch_invariant else "off")
        if cfg.deterministic:  # said only when set: a log without it reads as before
            logger.info("Deterministic mode: on")
        logger.info("Batch window: %g ms", cfg.batch_window_ms)
        logger.info("CUDA graphs: %s, graph sync fix: %s", "on (simulated capture of the decode step)"
                    if cfg.cuda_graphs else "off", "on" if cfg.graph_sync_fix else "off")
        logger.info("Prefix caching: %s", "on" if cfg.prefix_cache else "off")
        logger.info("Indexer budget: %d, top-k tie-break: %s", cfg.indexer_budget, cfg.topk_tiebreak)
        if cfg.decode_defect:  # said only when planted: a log without it reads as before
            logger.info("Planted decode-only defect: on")
        paths.log_paths(cfg)  # attention, router, top-k kernels, reduction path
        logger.info("Router tie share: %g", cfg.router_tie_share)
    tuner = Autotuner(
        cfg.autotune_cache_dir, cfg.moe_backend, cfg.resolved_backend, cfg.fused_finalize,
        desc, cfg.autotune_legacy_key,
    )
    if log_startup:
        tuner.log_startup()
    model = TinyMoE(cfg.seed, cfg.max_model_len, device, dtype)
    engine = Engine(cfg, model, tuner)
    metrics = Metrics(cfg.served_name)
    scheduler = Scheduler(engine, metrics, cfg.max_num_seqs, cfg.batch_window_ms)
    scheduler.start()
    return App(cfg, engine, scheduler, metrics, reset_prefix_cache=engine.reset_prefix_cache)


class Handler(BaseHTTPRequestHandler):
    app: App  # set on the subclass made by make_server
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes: with Nagle on, a keep-alive client's delayed ACK held every
    # answer with a body about 40 ms. vLLM's server (uvicorn) sets TCP_NODELAY too.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # route access logs to DEBUG
        logger.debug("%s - %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        cfg = self.app.cfg
        if path == "/health":
            self._send(200, b"")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": cfg.served_name, "object": "model", "owned_by": self.app.owner,
                "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len}]})
        elif path == "/version":
            self._json(200, {"version": self.app.version})
        elif path == "/metrics":
            self._send(200, self.app.metrics.render().encode(), "text/plain; version=0.0.4")
        elif route := next((p for p in self.app.routes if path.startswith(p)), None):
            self._json(*self.app.routes[route](path.removeprefix(route)))
        else:
            self._json(404, protocol.APIError(404, f"Not found: {path}", "NotFoundError").body())

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        arrival_ns = time.time_ns()
        if path == "/reset_prefix_cache" and self.app.reset_prefix_cache is not None:
            logger.info("Prefix cache reset: %d blocks dropped", self.app.reset_prefix_cache())  # as vLLM's: 200
            self._send(200, b"")
            return
        if path not in ("/v1/completions", "/tokenize"):
            self._json(404, protocol.APIError(404, f"Not found: {path}", "NotFoundError").body())
            return
        try:
            try:
                body = json.loads(raw or b"null")
            except ValueError as exc:
                raise protocol.APIError(400, f"Invalid JSON body: {exc}") from exc
            if path == "/tokenize":  # as vLLM answers it
                ids = protocol.prompt_ids(body.get("prompt") if isinstance(body, dict) else None, self.app.tokenizer)
                self._json(200, {"count": len(ids), "max_model_len": self.app.cfg.max_model_len, "tokens": ids,
                                 "token_strs": None})
                return
            tok = self.app.tokenizer
            req, opts = protocol.parse_completion(body, self.app.cfg, tok)
            rid = protocol.new_request_id()
            job = self.app.scheduler.submit(rid, req, arrival_ns, stream=opts.stream)
            if opts.stream:
                self._stream(streaming.events(job, rid, self.app.cfg.served_name, opts, REQUEST_TIMEOUT_S, tok))
                return
            response = protocol.build_response(rid, self.app.cfg.served_name, req, opts, job.wait(REQUEST_TIMEOUT_S),
                                               tok)
            self._json(200, {**response, "engine_trace": job.trace()})
        except protocol.APIError as err:
            self._json(err.status, err.body())
        except Exception as exc:
            logger.exception("Request failed")
            self._json(500, protocol.APIError(500, str(exc), "InternalServerError").body())


    def _stream(self, events: Iterator[bytes]) -> None:
        """Server-sent events in chunked transfer encoding, each written as it comes: the connection stays
        open for the client's next request (keep-alive)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            try:
                for event in events:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            except (ConnectionError, TimeoutError):
                raise
            except Exception as exc:  # headers are out: the failure becomes the stream's last event
                logger.exception("Stream failed")
                event = b"data: " + json.dumps(protocol.APIError(500, str(exc), "InternalServerError").body()).encode()
                self.wfile.write(b"%x\r\n%s\n\n\r\n" % (len(event) + 2, event))
            self.wfile.write(b"0\r\n\r\n")
        except (ConnectionError, TimeoutError):  # the client left: the engine finishes the sequence anyway
            self.close_connection = True


class Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


def make_server(app: App, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"app": app})
    return Server((host, port), handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    return t


def serve_until_signal(app: App, host: str, port: int, banner: str) -> None:
    """Serve until SIGTERM or SIGINT, then stop the server and the scheduler. `banner` names what serves (the
    line the orchestrator's readiness and log facts look for)."""
    server = make_server(app, host, port)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        logger.info("Received signal %d, shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    logger.info("Starting %s server on http://%s:%d", banner, host, server.server_address[1])
    serve_in_thread(server)
    stop.wait()  # a signal interrupts the wait: the handler runs at once, not at a polling tick
    server.shutdown()
    server.server_close()
    app.scheduler.stop()
    logger.info("Shutdown complete")
