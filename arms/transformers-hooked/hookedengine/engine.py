"""Generation on a Transformers model for the reference engine's scheduler: the window's requests as one
left-padded static batch (Transformers' modeling code and KV cache, every row decoded until the last one ends, as
its `generate` does), or, batch-invariant, each request alone. Flagged requests are digested (digests.py)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
from refengine.engine import GenRequest, GenResult, OnToken, TokenLogprobs, generator, position_logprobs, sample

from hookedengine import compiled
from hookedengine.config import HookedConfig
from hookedengine.digests import DigestStore, Recorder
from hookedengine.kv import KVWindow
from hookedengine.rows import StepLayout, Target

logger = logging.getLogger(__name__)


class HookedEngine:
    def __init__(self, cfg: HookedConfig, model: Any, eos_id: int | None, pad_id: int, device: torch.device,
                 store: DigestStore) -> None:
        self.cfg, self.model, self.eos_id, self.pad_id, self.device = cfg, model, eos_id, pad_id, device
        self.store = store
        self.recorder = Recorder(model, cfg.digest_head, store, cfg.digest_depth, cfg.digest_under)
        self.window = 1  # requests in the current window: what a planted batch-variant module splits by
        self.skips_said = False  # --cuda-graphs: whether the log said that torch ran a graph without them
        self.forwards = compiled.Forwards(model, model)  # the prefill's and a decode step's (compiled.forwards)

    @torch.no_grad()  # not inference_mode: the hooks tell an unchanged tensor by its version counter
    def run_batch(self, reqs: list[GenRequest], on_token: OnToken | None = None) -> list[GenResult]:
        results = [GenResult(batch_size=len(reqs)) for _ in reqs]
        self.window = len(reqs)
        flagged = [r.request_id for r in reqs if self._digested(r)]
        groups = [[i] for i in range(len(reqs))] if self.cfg.batch_invariant else [list(range(len(reqs)))]
        with self.recorder.attached(flagged) if flagged else contextlib.nullcontext():
            for group in groups:
                self._run_group(reqs, group, results, on_token)
        return results

    def _forward(self, ids: torch.Tensor, kv: KVWindow, pos: torch.Tensor, decode: bool) -> torch.Tensor:
        forward = self.forwards.decode if decode else self.forwards.prefill
        out = forward(input_ids=ids.to(self.device), attention_mask=kv.mask.to(self.device),
                      position_ids=pos.to(self.device), past_key_values=kv.cache, use_cache=True)
        if self.cfg.cuda_graphs and decode:  # out of the graphs' pool, which the next replay overwrites
            if not self.skips_said and (skips := compiled.graph_skips()):
                self.skips_said = True
                logger.warning("CUDA graphs skipped for %d compiled graph(s): part of the forward runs without them "
                               "(TORCH_LOGS=perf_hints says why)", skips)
            return compiled.keep(out.logits, kv.cache, kv.static)
        return out.logits  # type: ignore[no-any-return]

    def _run_group(self, reqs: list[GenRequest], group: list[int], results: list[GenResult],
                   on_token: OnToken | None) -> None:
        rs = [reqs[i] for i in group]
        window_ids = [r.request_id for r in reqs]
        lens = [len(r.prompt_ids) for r in rs]
        width = max(lens)
        pads = [width - n for n in lens]
        ids = torch.full((len(rs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rs), width), dtype=torch.long)
        for j, r in enumerate(rs):
            ids[j, pads[j]:] = torch.tensor(r.prompt_ids, dtype=torch.long)
            mask[j, pads[j]:] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        targets = {r.request_id: Target(j, pads[j], width, lens[j]) for j, r in enumerate(rs)
                   if self._digested(r)}
        self.recorder.begin_step(StepLayout(0, len(rs), width, window_ids, targets))
        kv = KVWindow(self.model.config, mask, max(r.max_tokens for r in rs), self.cfg.static_cache)
        logits = self._forward(ids, kv, pos, decode=False)
        for j, r in enumerate(rs):
            if r.prompt_logprobs is not None:
                lp = logits[j, pads[j]:].float().log_softmax(-1)
                results[group[j]].prompt_logprobs = prompt_logprobs(r, lp)
        gens = [generator(r) for r in rs]
        active = [j for j, r in enumerate(rs) if r.max_tokens > 0]
        for j, r in enumerate(rs):
            if r.max_tokens <= 0:  # no token to tell: its stream ends with the batch
                self._finished(r, results[group[j]], group[j], None)
        step, last = 0, logits[:, -1].float().log_softmax(-1)
        while active:
            still = []
            for j in active:
                r, res = rs[j], results[group[j]]
                tok = sample(last[j], r, gens[j])
                res.output_ids.append(tok)
                if r.logprobs is not None:
                    res.logprobs.append(position_logprobs(last[j], tok, r.logprobs))
                if tok == self.eos_id and not r.ignore_eos:
                    res.finish_reason = "stop"
                elif len(res.output_ids) >= r.max_tokens:
                    res.finish_reason = "length"
                else:
                    still.append(j)
                    if on_token is not None:
                        on_token(group[j], res, False)
                    continue
                self._finished(r, res, group[j], on_token)
            active = still
            if not active:
                break
            step += 1
            nxt = torch.full((len(rs), 1), self.pad_id, dtype=torch.long)
            for j in active:
                nxt[j, 0] = results[group[j]].output_ids[-1]
            kv.grow()
            pos = pos[:, -1:] + 1
            targets = {rs[j].request_id: Target(j, 0, 1, lens[j] + len(results[group[j]].output_ids))
                       for j in active if self._digested(rs[j])}
            self.recorder.begin_step(StepLayout(step, len(rs), 1, window_ids, targets))
            last = self._forward(nxt, kv, pos, decode=True)[:, -1].float().log_softmax(-1)

    def _digested(self, r: GenRequest) -> bool:
        return r.digest and self.cfg.digests

    def _finished(self, r: GenRequest, res: GenResult, index: int, on_token: OnToken | None) -> None:
        """A sequence's end: its digests are no longer recorded (the store's GET waits until they are computed)."""
        if self._digested(r):
            self.recorder.finish(r.request_id)
        if on_token is not None:
            on_token(index, res, True)


def prompt_logprobs(r: GenRequest, lp: torch.Tensor) -> list[TokenLogprobs | None]:
    """The prompt's logprobs from its rows' log-softmaxed logits (none for the first token)."""
    k = r.prompt_logprobs or 0
    return [None, *(position_logprobs(lp[pos - 1], r.prompt_ids[pos], k) for pos in range(1, len(r.prompt_ids)))]
