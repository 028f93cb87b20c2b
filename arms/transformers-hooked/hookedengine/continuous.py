"""Continuous batching (--continuous-batching): requests go into Transformers' own continuous batching (its
manager and FIFO scheduler, the paged KV cache, packed batches: each forward is one row [1, T] of the scheduled
requests' query tokens, request i's at [cu_q[i], cu_q[i+1])), and are streamed token by token to the reference
server's jobs. What would bypass the hooks is off: CUDA graphs, compile, async batching; and what would skip or
split a request's own forward: prefix sharing (a cached prefix is not computed again) and chunked prefill (a prompt
is never split: one that does not fit a forward's token budget waits for the next forward). Sampling is the
reference engine's (per-request temperature and seed, top-k logprobs) on the logits rows Transformers hands its
sampler. A flagged request's step is its own: 0 its prefill, k its k-th decode, whatever else is in the forward."""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from refengine.engine import GenRequest, GenResult, TokenLogprobs, generator, position_logprobs, sample
from refengine.metrics import Metrics
from refengine.scheduler import Job

from hookedengine.config import HookedConfig
from hookedengine.digests import DigestStore, Recorder
from hookedengine.engine import prompt_logprobs
from hookedengine.rows import StepLayout, Target

logger = logging.getLogger(__name__)

WHOLE_PROMPTS = "hookedengine-whole-prompts"  # the scheduler below, under its name in Transformers' mapping
PAGE_SIZE = 256  # tokens per KV cache block (Transformers' default)


@dataclass
class _Live:
    """A request inside the manager: its job, its result so far, and what our sampler recorded for it."""

    job: Job
    result: GenResult = field(default_factory=GenResult)
    gen: torch.Generator | None = None
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # one per sampled token, in order
    started: bool = False


def _whole_prompts_scheduler() -> type:
    """Transformers' FIFO scheduler, less chunked prefill: candidates are admitted in order while their tokens fit
    the forward's budget (the first always: the budget, --max-model-len, holds any prompt)."""
    from transformers.generation.continuous_batching.requests import RequestStatus
    from transformers.generation.continuous_batching.scheduler import FIFOScheduler

    class WholePrompts(FIFOScheduler):  # type: ignore[misc]
        def _process_candidates(self, candidates: list[Any], token_budget: int, *args: Any) -> Any:
            fitting: list[Any] = []
            left = token_budget
            for state in candidates:
                n = 1 if state.status == RequestStatus.DECODING else len(state.remaining_prefill_tokens)
                if n > left and fitting:
                    break
                fitting.append(state)
                left -= n
            return super()._process_candidates(fitting, token_budget, *args)

    return WholePrompts


class ContinuousRunner:
    """The server's scheduler (submit, stop) on Transformers' continuous batching manager."""

    def __init__(self, cfg: HookedConfig, model: Any, eos_id: int | None, metrics: Metrics,
                 store: DigestStore) -> None:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig
        from transformers.generation.continuous_batching.scheduler import SCHEDULER_MAPPING

        self.cfg, self.eos_id, self.metrics = cfg, eos_id, metrics
        self.recorder = Recorder(model, cfg.digest_head, store, cfg.digest_depth, cfg.digest_under)
        self.window = 1  # requests in the current forward: what a planted batch-variant module splits by
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._forward = 0  # forwards so far: a request's engine_trace steps
        self._sampled: list[str] = []  # this forward's requests that get a token, in the order of the logits rows
        self._prompt_rows: dict[str, tuple[int, int]] = {}  # this forward's prompt-logprobs requests: their span
        self._hooks: contextlib.ExitStack | None = None  # the Recorder attached while a flagged request is open
        self._flagged: list[str] = []  # this forward's flagged requests
        self._stop = threading.Event()
        SCHEDULER_MAPPING[WHOLE_PROMPTS] = _whole_prompts_scheduler()
        tokens = max(1, cfg.max_num_seqs) * cfg.max_model_len
        cb = ContinuousBatchingConfig(
            page_size=PAGE_SIZE, num_blocks=math.ceil(1.2 * tokens / PAGE_SIZE), max_batch_tokens=cfg.max_model_len,
            max_requests_per_batch=1 if cfg.batch_invariant else cfg.max_num_seqs, max_blocks_per_request=0,
            allow_block_sharing=False, use_async_batching=False, use_cuda_graph=False, scheduler_type=WHOLE_PROMPTS,
            return_logprobs=False, seed=cfg.seed, auto_switch_to_flash=False)
        gen_cfg = GenerationConfig(do_sample=False, eos_token_id=-1 if eos_id is None else eos_id)
        self.manager = model.init_continuous_batching(generation_config=gen_cfg, continuous_batching_config=cb)
        resolved = self.manager.continuous_batching_config
        bypass = [name for name, on in (("CUDA graphs", any(resolved.cuda_graph_booleans)),
                                        ("async batching", resolved.use_async_batching),
                                        ("compile", resolved.varlen_compile_config or resolved.decode_compile_config),
                                        ("prefix sharing", resolved.allow_block_sharing)) if on]
        if bypass:
            raise ValueError(f"--continuous-batching: Transformers turned on {', '.join(bypass)}, which the hooks "
                             "cannot see through; serve without --continuous-batching")
        self.manager.warmup()  # makes the batch processor now (nothing is captured: no graphs, no compile)
        bp = self.manager.batch_processor
        bp.model_runner._model_supports_logits_to_keep = False  # every query row's logits: each request's own rows
        bp.model_runner._sample = self._sample
        own_step, own_update = bp._generation_step, bp.update_batch
        self._bp = bp

        def step(model: Any) -> None:
            self._before_forward()
            try:
                own_step(model)
            except BaseException:
                self._detach()  # open digests are dropped: their GETs answer 404 at once, not after a wait
                raise

        def update() -> None:
            own_update()
            self._after_update()

        bp._generation_step, bp.update_batch = step, update
        model.register_forward_hook(self._logits_hook)
        logger.info("Continuous batching runs attention %s, at most %d requests and %d tokens a forward, %d cache "
                    "blocks of %d tokens", model.config._attn_implementation, resolved.max_requests_per_batch,
                    bp.max_batch_tokens, bp.cache.num_blocks, PAGE_SIZE)
        self._outputs = threading.Thread(target=self._deliver, name="hookedengine-cb-outputs", daemon=True)

    def start(self) -> None:
        self.manager.start()
        self._outputs.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self.manager.stop(block=True, timeout=timeout_s)
        self._outputs.join(timeout_s)

    def submit(self, request_id: str, request: GenRequest, arrival_ns: int = 0, stream: bool = False) -> Job:
        request.request_id = request_id
        job = Job(request_id, request, arrival_ns, tokens=queue.Queue() if stream else None)
        self.metrics.enqueue()
        with self._lock:
            self._live[request_id] = _Live(job, gen=generator(request))
        eos = -1 if request.ignore_eos or self.eos_id is None else self.eos_id
        added = self.manager.add_request(list(request.prompt_ids), request_id=request_id,
                                         max_new_tokens=request.max_tokens, streaming=True, eos_token_id=eos)
        if added is None:  # the manager is stopping or its loop failed: it dropped the request
            self._fail(request_id, RuntimeError("the continuous batching loop is not running"))
        return job

    # In the manager's generation thread, around each forward.
    def _before_forward(self) -> None:
        futures = self._bp.inputs_and_outputs.requests_in_batch
        ids = [f.state.request_id for f in futures]
        self.window, self._forward = len(ids), self._forward + 1
        live = [self._live[rid] for rid in ids]
        fresh = [lv for lv in live if not lv.started]
        if fresh:
            self.metrics.start_batch(len(fresh))
        targets: dict[str, Target] = {}
        self._sampled, self._prompt_rows, cu = [], {}, 0
        for f, lv in zip(futures, live, strict=True):
            start, cu = cu, cu + f.query_length
            rid, state = f.state.request_id, f.state
            if not lv.started:
                lv.started, lv.job.first_step = True, self._forward
            lv.job.last_step = self._forward
            lv.result.batch_size = max(lv.result.batch_size, len(ids))  # the most requests it shared a forward with
            if f.has_new_token:
                self._sampled.append(rid)
            if lv.job.request.prompt_logprobs is not None and not state.generated_tokens:
                self._prompt_rows[rid] = (start, cu)
            if lv.job.request.digest and self.cfg.digests:
                # its own step: 0 the prefill, k the forward that makes its token k+1
                targets[rid] = Target(0, start, cu, state.position_offset, step=len(state.generated_tokens))
        self._flagged = list(targets)
        if targets:
            new = [rid for rid in targets if rid not in self.recorder.open]
            if self._hooks is None:
                self._hooks = contextlib.ExitStack()
                self._hooks.enter_context(self.recorder.attached(new))
            elif new:
                self.recorder.add(new)
        if self._hooks is not None:
            self.recorder.begin_step(StepLayout(self._forward, 1, cu, ids, targets))

    def _logits_hook(self, module: Any, args: Any, output: Any) -> None:
        """The model's output: the prompt logprobs of a prefill that asked for them."""
        for rid, (start, stop) in self._prompt_rows.items():
            lv = self._live[rid]
            lp = output.logits[0, start:stop].float().log_softmax(-1)
            lv.result.prompt_logprobs = prompt_logprobs(lv.job.request, lp)

    def _sample(self, scores: torch.Tensor, output_ids: torch.Tensor) -> None:
        """In place of Transformers' sampler: each request's token from its logits row as the reference engine
        samples (greedy, or its temperature and seed), and its logprobs with top-k."""
        lps = scores[0].log_softmax(-1)
        for i, rid in enumerate(self._sampled):
            lv = self._live[rid]
            r = lv.job.request
            tok = sample(lps[i], r, lv.gen)
            output_ids[0, i] = tok
            if r.logprobs is not None:
                lv.logprobs.append(position_logprobs(lps[i], tok, r.logprobs))

    def _after_update(self) -> None:
        from transformers.generation.continuous_batching.requests import RequestStatus

        for rid in self._flagged:
            state = self._bp.scheduler.active_requests.get(rid)
            if state is None or state.status >= RequestStatus.FINISHED:
                self.recorder.finish(rid)
        if self._hooks is not None and not self.recorder.open:
            self._detach()

    def _detach(self) -> None:
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None

    # In the output thread: the manager's outputs to the jobs.
    def _deliver(self) -> None:
        from transformers.generation.continuous_batching.requests import RequestStatus

        while not self._stop.is_set():
            out = self.manager.get_result(timeout=0.1)
            if out is None:
                if not self.manager.is_running():  # stopped or failed: get_result answers at once
                    self._stop.wait(0.1)
                continue
            if out.status == RequestStatus.FAILED:
                self._fail(out.request_id, RuntimeError(out.error or "generation failed"))
                continue
            with self._lock:
                lv = self._live.get(out.request_id)
            if lv is None:
                continue
            res, r = lv.result, lv.job.request
            new, finished = out.generated_tokens[len(res.output_ids):], out.is_finished()
            if finished and new and new[-1] == self.eos_id and not r.ignore_eos:
                res.finish_reason = "stop"
            for j, tok in enumerate(new):
                res.output_ids.append(tok)
                if r.logprobs is not None:
                    res.logprobs.append(lv.logprobs[len(res.output_ids) - 1])
                if lv.job.tokens is not None:
                    lv.job.tokens.put((res, finished and j == len(new) - 1))
            if finished:
                self._done(out.request_id, lv)

    def _done(self, rid: str, lv: _Live) -> None:
        with self._lock:
            self._live.pop(rid, None)
        job, res = lv.job, lv.result
        job.result = res
        self.metrics.finish(res.finish_reason, len(job.request.prompt_ids), len(res.output_ids))
        logger.info("Finished request %s prompt_tokens=%d completion_tokens=%d batch_size=%d", rid,
                    len(job.request.prompt_ids), len(res.output_ids), res.batch_size)
        job.done.set()
        if job.tokens is not None:
            job.tokens.put(None)

    def _fail(self, rid: str, error: BaseException) -> None:
        with self._lock:
            lv = self._live.pop(rid, None)
        if lv is None:
            return
        self.metrics.fail()
        lv.job.error = error
        lv.job.done.set()
        if lv.job.tokens is not None:
            lv.job.tokens.put(None)
