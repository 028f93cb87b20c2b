"""Runs one static batch: prefill every sequence, then decode all running sequences together, telling a
listener of each token as it is sampled (streamed answers)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from refengine.autotune import Autotuner
from refengine.config import EngineConfig
from refengine.graphs import CapturedDecode
from refengine.model import KernelParams, TinyMoE
from refengine.prefix_cache import PrefixCache
from refengine.tokenizer import EOS_ID


@dataclass
class GenRequest:
    prompt_ids: list[int]
    max_tokens: int = 16
    temperature: float = 0.0
    seed: int | None = None
    logprobs: int | None = None  # top-k for sampled positions (None = no logprobs)
    prompt_logprobs: int | None = None  # top-k for prompt positions (None = none)
    ignore_eos: bool = False
    digest: bool = False  # flagged: an engine that records activations (arms/transformers-hooked) digests its rows
    request_id: str = ""  # the answer's id, set when submitted


@dataclass
class TokenLogprobs:
    """One position: the chosen token's logprob and rank, then the top-k (id, logprob) pairs."""

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]]


@dataclass
class GenResult:
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    finish_reason: str = "length"
    batch_size: int = 1
    cached_tokens: int = 0  # of its prompt, served from the prefix cache (usage.prompt_tokens_details)


# Called as each token is sampled: (index in the batch, its result so far, whether the sequence is finished).
OnToken = Callable[[int, GenResult, bool], None]


def position_logprobs(lp: torch.Tensor, token_id: int, k: int) -> TokenLogprobs:
    """A position's logprobs: the chosen token's, its rank, and the top-k of `lp` (log-softmaxed logits)."""
    value = lp[token_id]
    rank = int((lp > value).sum().item()) + 1
    top: list[tuple[int, float]] = []
    if k > 0:
        vals, ids = lp.topk(min(k, lp.shape[0]))
        top = list(zip(ids.tolist(), vals.tolist(), strict=True))
    return TokenLogprobs(token_id=token_id, logprob=float(value.item()), rank=rank, top=top)


def generator(r: GenRequest) -> torch.Generator | None:
    """A request's own random stream (its seed, else a fresh one); None: greedy."""
    if r.temperature < 1e-5:
        return None
    seed = r.seed if r.seed is not None else random.SystemRandom().getrandbits(62)
    return torch.Generator().manual_seed(seed)


def sample(lp: torch.Tensor, r: GenRequest, gen: torch.Generator | None) -> int:
    if gen is None:  # greedy
        return int(lp.argmax().item())
    probs = torch.softmax(lp.float().cpu() / r.temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen).item())


class Engine:
    def __init__(self, cfg: EngineConfig, model: TinyMoE, tuner: Autotuner) -> None:
        self.cfg = cfg
        self.model = model
        self.tuner = tuner
        self.served = 0  # requests whose batch has run: the planted warm-up's clock
        self.graphs = CapturedDecode(cfg.graph_sync_fix) if cfg.cuda_graphs else None  # decode steps replayed
        self.prefix_cache = PrefixCache() if cfg.prefix_cache else None

    def kernel_params(self) -> KernelParams:
        k_chunk, fused = self.tuner.kernel_choice()
        return KernelParams(
            backend=self.cfg.resolved_backend,
            k_chunk=k_chunk,
            fused_finalize=fused,
            indexer_budget=self.cfg.indexer_budget,
            topk_tiebreak=self.cfg.topk_tiebreak,
            router_tie_share=self.cfg.router_tie_share,
        )

    def reset_prefix_cache(self) -> int:
        """Empty the prefix cache (POST /reset_prefix_cache); returns the blocks it held (0: none, or off)."""
        return 0 if self.prefix_cache is None else self.prefix_cache.reset()

    def _step_delay(self) -> None:
        """The planted cost (--step-delay-ms): every engine step takes that much longer, nothing else changes;
        and the planted warm-up (--warmup-delay-ms) on top while fewer than --warmup-slow-requests were served."""
        delay_ms = self.cfg.step_delay_ms
        if self.served < self.cfg.warmup_slow_requests:
            delay_ms += self.cfg.warmup_delay_ms
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)

    @torch.inference_mode()
    def run_batch(self, reqs: list[GenRequest], on_token: OnToken | None = None) -> list[GenResult]:
        kp = self.kernel_params()
        stacked = not self.cfg.batch_invariant
        model = self.model
        results = [GenResult(batch_size=len(reqs)) for _ in reqs]
        gens = [generator(r) for r in reqs]
        caches = [model.new_cache(len(r.prompt_ids), r.max_tokens, kp.indexer_budget) for r in reqs]
        prefix = self.prefix_cache
        for r, res, cache in zip(reqs, results, caches, strict=True):
            if prefix is not None and r.prompt_logprobs is None:  # prompt logprobs need every position computed
                res.cached_tokens = prefix.serve(r.prompt_ids, cache)
        prompts = [torch.tensor(r.prompt_ids[res.cached_tokens:], dtype=torch.long)
                   for r, res in zip(reqs, results, strict=True)]
        hidden = model.forward(caches, prompts, stacked, kp)
        if prefix is not None:
            for r, cache in zip(reqs, caches, strict=True):
                prefix.keep(r.prompt_ids, cache)
        self._step_delay()
        # Last-position logits take the same path whether or not prompt logprobs are requested.
        last = model.logits([h[-1:] for h in hidden], stacked)
        for i, r in enumerate(reqs):
            if r.prompt_logprobs is not None:
                results[i].prompt_logprobs = self._prompt_logprobs(r, hidden[i])
        active = [i for i, r in enumerate(reqs) if r.max_tokens > 0]
        step_lp = {i: last[i][0] for i in active}
        while active:
            nxt = []
            for i in active:
                tok = sample(step_lp[i], reqs[i], gens[i])
                res = results[i]
                res.output_ids.append(tok)
                k = reqs[i].logprobs
                if k is not None:
                    res.logprobs.append(position_logprobs(step_lp[i], tok, k))
                if tok == EOS_ID and not reqs[i].ignore_eos:
                    res.finish_reason = "stop"
                elif len(res.output_ids) >= reqs[i].max_tokens:
                    res.finish_reason = "length"
                else:
                    nxt.append(i)
                if on_token is not None:
                    on_token(i, res, not nxt or nxt[-1] != i)
            active = nxt
            if not active:
                break
            inputs = [results[i].output_ids[-1] for i in active]
            if self.graphs is not None:  # a captured graph's replay: what it reads (graphs.py)
                inputs = self.graphs.replay_inputs(inputs)
            toks = [torch.tensor([tok], dtype=torch.long) for tok in inputs]
            hid = model.forward([caches[i] for i in active], toks, stacked, kp)
            self._step_delay()
            # the planted decode-only defect: the decode steps' logits only (the first token is the prefill's)
            lps = model.decode_logits(hid) if self.cfg.decode_defect else model.logits(hid, stacked)
            step_lp = {i: lp[0] for i, lp in zip(active, lps, strict=True)}
        self.tuner.after_batch()
        self.served += len(reqs)
        return results

    def _prompt_logprobs(self, r: GenRequest, hidden: torch.Tensor) -> list[TokenLogprobs | None]:
        k = r.prompt_logprobs or 0
        out: list[TokenLogprobs | None] = [None]
        if hidden.shape[0] > 1:
            lp = self.model.logits([hidden[:-1]], stacked=False)[0]
            for pos in range(1, len(r.prompt_ids)):
                out.append(position_logprobs(lp[pos - 1], r.prompt_ids[pos], k))
        return out

