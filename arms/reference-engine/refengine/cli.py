"""Command line: vLLM-style flags, env fallbacks, logging setup and the serve loop."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from typing import Any

from refengine.config import BATCH_WINDOW_MS, DETERMINISTIC_BATCH_WINDOW_MS, MOE_BACKENDS, EngineConfig

logger = logging.getLogger("refengine.cli")

# vLLM flags accepted for command-line compatibility but without effect here (logged at startup).
IGNORED_VALUE_FLAGS = (
    ("--gpu-memory-utilization",),
    ("--tensor-parallel-size", "-tp"),
    ("--max-num-batched-tokens",),
    ("--quantization", "-q"),
    ("--attention-backend",),
    ("--kv-cache-dtype",),
    ("--generation-config",),
    ("--logprobs-mode",),
)
IGNORED_BOOL_FLAGS = (
    "--enforce-eager",
    "--enable-prompt-tokens-details",  # its usage always says the prompt tokens its prefix cache served
    "--no-enable-prompt-tokens-details",
    "--trust-remote-code",
    "--disable-log-stats",
    "--async-scheduling",
    "--no-async-scheduling",
    "--enable-flashinfer-autotune",
    "--no-enable-flashinfer-autotune",
)
# Env vars the engine reads (only when the matching flag is absent).
KNOWN_ENV = ("REFENGINE_FUSED_FINALIZE", "VLLM_BATCH_INVARIANT", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR")


class _Ignored(argparse.Action):
    """Records an accepted-but-unused flag (with its value) for the startup log."""

    def __call__(self, parser: Any, ns: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        ns.ignored.append(option_string if values is None or values == [] else f"{option_string} {values}")


def _non_negative_ms(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a delay: give milliseconds >= 0")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a share: give a number from 0 to 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="refengine", description="Reference engine (vLLM-shaped) with known nondeterminism"
    )
    p.add_argument("model_tag", nargs="?", default=None, help="model name (as in `vllm serve MODEL`)")
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-logprobs", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--fused-finalize", action=argparse.BooleanOptionalAction, default=None,
                   help="MoE finalize with atomics-like order (default off; env REFENGINE_FUSED_FINALIZE)")
    p.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=None,
                   help="per-sequence linear layers (default on; env VLLM_BATCH_INVARIANT)")
    p.add_argument("--enable-prefix-caching", dest="prefix_cache", action=argparse.BooleanOptionalAction,
                   default=False, help="serve a prompt's kept block-aligned prefix from the cache (default off)")
    p.add_argument("--indexer-budget", type=int, default=2048)
    p.add_argument("--topk-tiebreak", choices=("stable", "random"), default="stable",
                   help="how the indexer's top-k, and the router's where --router-tie-share ties it, break ties")
    p.add_argument("--router-tie-share", type=_share, default=0.0,
                   help="a share (0..1) of the MoE router's rows given an exact tie at the k-th expert (default 0)")
    p.add_argument("--moe-backend", choices=MOE_BACKENDS, default="auto")
    p.add_argument("--autotune-cache-dir", default=None, help="env VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR")
    p.add_argument("--autotune-legacy-key", action="store_true", help="omit finalize mode from the cache key")
    p.add_argument("--batch-window-ms", type=float, default=None,
                   help=f"how long a batch waits for more requests (default {BATCH_WINDOW_MS:g}; "
                        f"{DETERMINISTIC_BATCH_WINDOW_MS:g} with --deterministic)")
    p.add_argument("--deterministic", action="store_true",
                   help="batch invariance on, whatever --batch-invariant says, and (a second change) the batch "
                        f"window {DETERMINISTIC_BATCH_WINDOW_MS:g} ms unless --batch-window-ms is given (default off)")
    p.add_argument("--step-delay-ms", type=_non_negative_ms, default=0.0,
                   help="a planted cost: every engine step (prefill, decode) sleeps this much more; answers unchanged")
    p.add_argument("--warmup-slow-requests", type=int, default=0,
                   help="a planted warm-up: batches begun before this many requests were served are slower")
    p.add_argument("--warmup-delay-ms", type=_non_negative_ms, default=0.0,
                   help="how much slower: every step of such a batch sleeps this much more")
    p.add_argument("--decode-defect", action="store_true",
                   help="a planted decode-only defect: decode steps' lm_head in bf16 split-K partials; prefill exact")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
                   help="a simulated CUDA-graph capture of the decode step, with the seed's stale-step defect: each "
                        "replay reads the previous step's tokens (default off)")
    p.add_argument("--graph-sync-fix", action=argparse.BooleanOptionalAction, default=False,
                   help="the defect's fix: a replay waits for its step's tokens (default off)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--list-knobs", action="store_true", help="print known flags and env vars as JSON and exit")
    p.set_defaults(ignored=[])
    for names in IGNORED_VALUE_FLAGS:
        p.add_argument(*names, action=_Ignored, dest="_ign_" + names[0].lstrip("-"), help=argparse.SUPPRESS)
    for name in IGNORED_BOOL_FLAGS:
        p.add_argument(name, action=_Ignored, nargs=0, dest="_ign_" + name.lstrip("-"), help=argparse.SUPPRESS)
    return p


def _known_flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({s for a in parser._actions for s in a.option_strings})


KNOWN_FLAGS: tuple[str, ...] = tuple(_known_flags(build_parser()))


def split_unknown(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate unknown flags (and a following value, if any) from the argv we parse."""
    known, unknown = [], []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if tok.startswith("-") and tok != "-" and name not in KNOWN_FLAGS:
            unknown.append(tok)
            if "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                unknown.append(argv[i + 1])
                i += 1
        else:
            known.append(tok)
        i += 1
    return known, unknown


def _env_bool(name: str) -> bool | None:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    return v.strip().lower() in ("1", "true", "yes", "on")


def config_from_args(ns: argparse.Namespace) -> EngineConfig:
    fused = ns.fused_finalize if ns.fused_finalize is not None else (_env_bool("REFENGINE_FUSED_FINALIZE") or False)
    inv = ns.batch_invariant
    if inv is None:
        env = _env_bool("VLLM_BATCH_INVARIANT")
        inv = True if env is None else env
    window = ns.batch_window_ms
    if window is None:
        window = DETERMINISTIC_BATCH_WINDOW_MS if ns.deterministic else BATCH_WINDOW_MS
    cache_dir = ns.autotune_cache_dir or os.environ.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR") or None
    return EngineConfig(
        model=ns.model or ns.model_tag or EngineConfig.model,
        served_model_name=ns.served_model_name,
        max_model_len=ns.max_model_len,
        max_num_seqs=ns.max_num_seqs,
        max_logprobs=ns.max_logprobs,
        seed=ns.seed,
        device=ns.device,
        dtype=ns.dtype,
        fused_finalize=fused,
        batch_invariant=inv or ns.deterministic,
        indexer_budget=ns.indexer_budget,
        topk_tiebreak=ns.topk_tiebreak,
        router_tie_share=ns.router_tie_share,
        moe_backend=ns.moe_backend,
        autotune_cache_dir=cache_dir,
        autotune_legacy_key=ns.autotune_legacy_key,
        batch_window_ms=window,
        deterministic=ns.deterministic,
        step_delay_ms=ns.step_delay_ms,
        warmup_slow_requests=ns.warmup_slow_requests,
        warmup_delay_ms=ns.warmup_delay_ms,
        decode_defect=ns.decode_defect,
        cuda_graphs=ns.cuda_graphs,
        graph_sync_fix=ns.graph_sync_fix,
        prefix_cache=ns.prefix_cache,
    )


def non_default_args(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for a in parser._actions:
        if a.dest in ("help", "ignored", "list_knobs") or a.dest.startswith("_ign_"):
            continue
        v = getattr(ns, a.dest, None)
        if v != a.default:
            out["model" if a.dest == "model_tag" else a.dest] = v
    return out


def setup_logging(level: str = "INFO", name: str = "refengine") -> None:
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        logging.Formatter("%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s", "%m-%d %H:%M:%S")
    )
    root = logging.getLogger(name)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    for child, found in logging.root.manager.loggerDict.items():  # a dictConfig before (Hydra's) disables them
        if child.startswith(f"{name}.") and isinstance(found, logging.Logger):
            found.disabled = False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    known, unknown = split_unknown(argv)
    ns = parser.parse_args(known)
    if ns.list_knobs:
        print(json.dumps({"flags": list(KNOWN_FLAGS), "env": list(KNOWN_ENV)}))
        return 0
    setup_logging(ns.log_level)
    logger.info("non-default args: %s", non_default_args(parser, ns))
    if ns.ignored:
        logger.info("Ignoring unsupported flag(s): %s", " ".join(ns.ignored))
    if unknown:
        logger.warning("Ignoring unknown flag(s): %s", " ".join(unknown))
    cfg = config_from_args(ns)

    from refengine.server import build_app, serve_until_signal  # heavy: imports torch

    serve_until_signal(build_app(cfg), ns.host, ns.port, "vLLM-compatible")
    return 0
