"""Static batching: one worker takes the first waiting request, waits a short window for more
(up to ``max_num_seqs``), then runs that batch to completion. Later arrivals wait for the next batch.

Every request records when it arrived and the engine steps it ran in (a global step counter: a batch's
prefill is one step, each decode iteration one more), so a client can prove which requests ran together.
A streamed request also gets each of its tokens as it is sampled (`Job.tokens`), and its sequence's end at
once; an unstreamed one is answered when its whole batch is done."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from refengine.engine import GenRequest, GenResult, OnToken
from refengine.metrics import Metrics

logger = logging.getLogger(__name__)


@dataclass
class Job:
    request_id: str
    request: GenRequest
    arrival_ns: int = 0  # wall clock, as the request was complete at the server
    done: threading.Event = field(default_factory=threading.Event)
    result: GenResult | None = None
    error: BaseException | None = None
    first_step: int = 0
    last_step: int = 0
    # Streamed: (its result so far, whether finished) as each token is sampled; None once the batch is over.
    tokens: queue.Queue[tuple[GenResult, bool] | None] | None = None

    def trace(self) -> dict[str, int]:
        """Returned with the response (`engine_trace`): the server's view of this request."""
        return {"arrival_ns": self.arrival_ns, "first_step": self.first_step, "last_step": self.last_step}

    def wait(self, timeout_s: float | None = None) -> GenResult:
        if not self.done.wait(timeout_s):
            raise TimeoutError(f"request {self.request_id} not finished after {timeout_s} s")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class BatchRunner(Protocol):
    """What the scheduler runs a batch on: this engine's `Engine`, or another built on this server."""

    def run_batch(self, reqs: list[GenRequest], on_token: OnToken | None = None) -> list[GenResult]: ...


class Scheduler:
    def __init__(self, engine: BatchRunner, metrics: Metrics, max_num_seqs: int, batch_window_ms: float) -> None:
        self.engine = engine
        self.metrics = metrics
        self.max_num_seqs = max_num_seqs
        self.batch_window_s = batch_window_ms / 1000.0
        self._queue: queue.Queue[Job | None] = queue.Queue()  # None: wake up, stopping
        self._stop = threading.Event()
        self._next_step = 0  # only the scheduler thread moves it
        self._thread = threading.Thread(target=self._loop, name="refengine-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._queue.put(None)  # the loop waits on the queue: wake it now, not at its next timeout
        self._thread.join(timeout_s)

    def submit(self, request_id: str, request: GenRequest, arrival_ns: int = 0, stream: bool = False) -> Job:
        request.request_id = request_id
        job = Job(request_id, request, arrival_ns, tokens=queue.Queue() if stream else None)
        self.metrics.enqueue()
        self._queue.put(job)
        return job

    def _next_batch(self) -> list[Job]:
        try:
            first = self._queue.get(timeout=0.1)
        except queue.Empty:
            return []
        if first is None:
            return []
        batch = [first]
        deadline = time.monotonic() + self.batch_window_s
        while len(batch) < self.max_num_seqs:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                job = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if job is None:
                break
            batch.append(job)
        return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self._next_batch()
            if batch:
                self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        self.metrics.start_batch(len(batch))
        first = self._next_step
        for j in batch:
            j.first_step = first

        def on_token(i: int, res: GenResult, finished: bool) -> None:
            job = batch[i]
            if finished:
                job.last_step = first + len(res.output_ids)
            if job.tokens is not None:
                job.tokens.put((res, finished))

        try:
            results = self.engine.run_batch([j.request for j in batch], on_token)
        except Exception as exc:  # deliver the failure to every waiting handler
            logger.exception("Batch of %d failed", len(batch))
            for j in batch:
                self.metrics.fail()
                j.error = exc
                j.done.set()
                if j.tokens is not None:
                    j.tokens.put(None)
            return
        self._next_step += 1 + max(len(r.output_ids) for r in results)  # prefill, then one step a token
        for j, res in zip(batch, results, strict=True):
            j.result = res
            j.last_step = first + len(res.output_ids)
            self.metrics.finish(res.finish_reason, len(j.request.prompt_ids), len(res.output_ids))
            logger.info(
                "Finished request %s prompt_tokens=%d completion_tokens=%d batch_size=%d",
                j.request_id, len(j.request.prompt_ids), len(res.output_ids), res.batch_size,
            )
            j.done.set()
            if j.tokens is not None:
                j.tokens.put(None)
