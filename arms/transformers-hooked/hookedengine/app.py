"""Wiring: the model and tokenizer from a local folder (its facts logged at startup), the planted switch, the
engine, the reference engine's scheduler and server state, and the digests route."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from refengine.metrics import Metrics
from refengine.scheduler import Scheduler
from refengine.server import App, resolve_device

from hookedengine import __version__, compiled
from hookedengine.config import HookedConfig
from hookedengine.digests import DigestStore, scoped
from hookedengine.engine import HookedEngine
from hookedengine.tokenizer import HFTokenizer

logger = logging.getLogger("hookedengine.app")


def plant_batch_variant(model: torch.nn.Module, name: str, window: Callable[[], int]) -> None:
    """Make one Linear batch-variant, nothing else: its reduction over K is split into as many chunks as the
    window has requests, summed in order (alone: one chunk, the module's own kernel)."""
    try:
        module = model.get_submodule(name)
    except AttributeError:
        leaves = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        raise ValueError(f"--plant-batch-variant {name}: no such module; Linear modules: {', '.join(leaves[:8])} "
                         f"... ({len(leaves)} in all)") from None
    if not isinstance(module, torch.nn.Linear):
        raise ValueError(f"--plant-batch-variant {name}: a {type(module).__name__}, not a Linear; name a Linear")
    linear = module
    own = linear.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        chunks = min(max(1, window()), linear.in_features)
        if chunks == 1:
            return own(x)
        bounds = [linear.in_features * c // chunks for c in range(chunks + 1)]
        out = sum(F.linear(x[..., a:b], linear.weight[:, a:b]) for a, b in itertools.pairwise(bounds))
        assert isinstance(out, torch.Tensor)
        return out if linear.bias is None else out + linear.bias

    linear.forward = forward  # type: ignore[method-assign,assignment]


def build_app(cfg: HookedConfig) -> App:
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device, dtype, desc = resolve_device(cfg)
    if refused := compiled.refusal(cfg.cuda_graphs, cfg.compile, device, cfg.digests,
                                   cfg.continuous_batching, cfg.static_cache):
        raise ValueError(refused)
    if cfg.invariant_kernels:  # before the model: its attention is ours, and every op from here on
        from hookedengine import invariant

        cfg = dataclasses.replace(cfg, attn_implementation=invariant.enable())
    tok = AutoTokenizer.from_pretrained(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype,
                                                 attn_implementation=cfg.attn_implementation).to(device).eval()
    if not cfg.max_model_len:
        cfg = dataclasses.replace(cfg, max_model_len=int(getattr(model.config, "max_position_embeddings", 2048)))
    if cfg.digests:  # a scope that leaves no module: refused before the startup log says it
        scoped(model, cfg.digest_depth, cfg.digest_under)
    facts: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__, "device": desc,
                             "dtype": str(dtype).removeprefix("torch."),
                             # what Transformers resolved the requested implementation to, as it runs
                             "attention": getattr(model.config, "_attn_implementation", None)
                             or cfg.attn_implementation}
    log_startup(cfg, facts)
    tokenizer = HFTokenizer(tok)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tokenizer.eos_id or 0)
    store = DigestStore()
    metrics = Metrics(cfg.served_name)
    engine: Any
    scheduler: Any
    if cfg.continuous_batching:  # Transformers' own scheduler: the server's submit() goes to it
        from hookedengine.continuous import ContinuousRunner

        engine = scheduler = ContinuousRunner(cfg, model, tokenizer.eos_id, metrics, store)
    else:
        engine = HookedEngine(cfg, model, tokenizer.eos_id, pad_id, device, store)
        scheduler = Scheduler(engine, metrics, cfg.max_num_seqs, cfg.batch_window_ms)
    if cfg.plant_batch_variant:
        plant_batch_variant(model, cfg.plant_batch_variant, lambda: engine.window)
    if isinstance(engine, HookedEngine):  # after the plant: it is compiled in
        engine.forwards = compiled.forwards(model, cfg.cuda_graphs, cfg.compile)
    scheduler.start()
    return App(cfg, engine, scheduler, metrics, tokenizer=tokenizer, owner="hookedengine", version=__version__,
               routes={"/v1/digests/": store.route(cfg.digest_head)})


def log_startup(cfg: HookedConfig, facts: dict[str, Any]) -> None:
    logger.info("hookedengine version %s, torch %s, transformers %s, device %s, dtype %s", __version__,
                facts["torch"], facts["transformers"], facts["device"], facts["dtype"])
    logger.info("Model %s, max model len %d", cfg.model, cfg.max_model_len)
    logger.info("Batch invariant: %s", "on" if cfg.batch_invariant else "off")
    logger.info("Batch invariant kernels: %s", "on" if cfg.invariant_kernels else "off")
    logger.info("Continuous batching: %s", "on" if cfg.continuous_batching else "off")
    logger.info("Attention implementation: %s", facts.get("attention", cfg.attn_implementation))
    logger.info("Planted batch-variant module: %s", cfg.plant_batch_variant or "none")
    scope = "".join(s for s in (f", modules of depth {cfg.digest_depth} at most" if cfg.digest_depth else "",
                                f", modules in {cfg.digest_under}" if cfg.digest_under else "") if s)
    logger.info("Digests of flagged requests: %s", f"on{scope}" if cfg.digests else "off")
    logger.info("CUDA graphs: %s, torch.compile: %s", "on" if cfg.cuda_graphs else "off",
                "on" if cfg.compile else "off")
    logger.info("KV cache: %s", "static" if cfg.static_cache else "dynamic")
