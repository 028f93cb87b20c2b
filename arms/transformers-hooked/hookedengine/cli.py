"""Command line: the model, its device and dtype, the batch window, the hooks; then the reference engine's server
(refengine.server) on this engine, with GET /v1/digests/{id}."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from refengine.cli import setup_logging

from hookedengine.config import HookedConfig

logger = logging.getLogger("hookedengine.cli")

KNOWN_ENV = ("HF_HUB_OFFLINE",)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hookedengine", description="A Transformers model served with activation digests")
    p.add_argument("model_tag", nargs="?", default=None, help="the model's folder (as `--model`)")
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="auto: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--attn-implementation", choices=("eager", "sdpa"), default="eager")
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--batch-window-ms", type=float, default=20.0)
    p.add_argument("--max-model-len", type=int, default=None, help="default: the model's max_position_embeddings")
    p.add_argument("--max-logprobs", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=False,
                   help="each request of a window runs alone, its rows computed as if alone (default off)")
    p.add_argument("--invariant-kernels", action=argparse.BooleanOptionalAction, default=False,
                   help="batch-invariant kernels (matmul, mean, softmax, log-softmax, attention): the window runs as "
                        "one batch, each row computed as if alone (default off)")
    p.add_argument("--plant-batch-variant", default=None, metavar="MODULE",
                   help="test switch: that Linear's reduction split into as many chunks as the window has requests")
    p.add_argument("--continuous-batching", action=argparse.BooleanOptionalAction, default=False,
                   help="Transformers' continuous batching (paged KV cache, packed forwards) instead of a static batch "
                        "window; with --batch-invariant: one request per forward")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
                   help="each decode step captured and replayed as CUDA graphs (a CUDA device; needs --no-digests "
                        "and --static-cache; default off)")
    p.add_argument("--static-cache", action=argparse.BooleanOptionalAction, default=False,
                   help="the KV cache preallocated at a fixed length (Transformers' StaticCache), so that a decode "
                        "step's shapes stay the same (--cuda-graphs needs it; default off: a cache grown each step)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                   help="torch.compile of the forward, Inductor's kernels (needs --no-digests; default off)")
    p.add_argument("--digest-head", type=int, default=8, help="first values kept per digest")
    p.add_argument("--digest-depth", type=int, default=0, metavar="N",
                   help="digest only modules whose name has at most N dotted parts (3: model.layers.K, the decoder "
                        "layers; default 0: every module)")
    p.add_argument("--digest-under", default=None, metavar="MODULE",
                   help="digest only that module and the modules inside it (default: the whole model)")
    p.add_argument("--digests", action=argparse.BooleanOptionalAction, default=True,
                   help="digest flagged requests (default on; off: no hooks ever, flagged requests served as others)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--list-knobs", action="store_true", help="print known flags and env vars as JSON and exit")
    return p


def known_flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({s for a in parser._actions for s in a.option_strings})


def config_from_args(ns: argparse.Namespace) -> HookedConfig:
    return HookedConfig(
        model=ns.model or ns.model_tag, served_model_name=ns.served_model_name, max_model_len=ns.max_model_len or 0,
        max_num_seqs=ns.max_num_seqs, max_logprobs=ns.max_logprobs, seed=ns.seed, device=ns.device, dtype=ns.dtype,
        batch_invariant=ns.batch_invariant, invariant_kernels=ns.invariant_kernels, batch_window_ms=ns.batch_window_ms,
        attn_implementation=ns.attn_implementation, plant_batch_variant=ns.plant_batch_variant,
        digest_head=ns.digest_head, digests=ns.digests, digest_depth=ns.digest_depth, digest_under=ns.digest_under,
        continuous_batching=ns.continuous_batching,
        cuda_graphs=ns.cuda_graphs, compile=ns.compile, static_cache=ns.static_cache,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if ns.list_knobs:
        print(json.dumps({"flags": known_flags(parser), "env": list(KNOWN_ENV)}))
        return 0
    if not (ns.model or ns.model_tag):
        parser.error("give the model's folder: --model PATH")
    if ns.digest_depth < 0:
        parser.error(f"--digest-depth {ns.digest_depth}: give 0 (every module) or a depth of 1 or more")
    for name in ("refengine", "hookedengine"):
        setup_logging(ns.log_level, name)
    if ns.invariant_kernels and ns.continuous_batching:
        logger.error("--invariant-kernels runs the static batch window (its attention takes padded rows, not "
                     "continuous batching's packed ones): drop --continuous-batching or --invariant-kernels")
        return 2
    cfg = config_from_args(ns)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder; nothing is fetched
    if not (Path(cfg.model) / "config.json").is_file():
        logger.error("--model %s: no model folder there (no config.json): give a local folder a Transformers "
                     "model was saved to (scripts/make-tiny-models.py makes tiny ones)", cfg.model)
        return 2

    import torch
    from refengine.server import serve_until_signal

    from hookedengine.app import build_app  # heavy: torch and transformers

    if cfg.device == "cuda" and not torch.cuda.is_available():
        logger.error("--device cuda: torch %s here sees no CUDA device (a CPU build, or no GPU visible): use "
                     "--device cpu, or run where a GPU is", torch.__version__)
        return 2
    try:
        app = build_app(cfg)
    except ValueError as exc:
        logger.error("%s", exc)
        return 2
    serve_until_signal(app, ns.host, ns.port, "hooked Transformers")
    return 0

