"""The code path the engine takes, one line each at start, so a run's log says which ran (the orchestrator
reads them as log facts: orchestrator/engines/reference.py, docs/reference-engine.md "Which path ran"). The
MoE backend, the finalize mode, batch invariance and the top-k tie-break have their lines in server.py;
these say the rest: the attention kernel, the router and its top-k kernel, the indexer's top-k kernel and
the reduction path of the linear layers."""

from __future__ import annotations

import logging

from refengine import model
from refengine.config import EngineConfig

logger = logging.getLogger(__name__)


def reduction(cfg: EngineConfig) -> str:
    """per_sequence: each sequence's rows alone through every linear layer (batch-invariant); stacked_split_k:
    the batch's rows in one matrix, its K reduction split by the row count (kernels.m_splits)."""
    return "per_sequence" if cfg.batch_invariant else "stacked_split_k"


def log_paths(cfg: EngineConfig) -> None:
    # vLLM's own line (vLLM 0.20.0 and later), as the reference engine prints vLLM's: model._sdpa
    logger.info("Using TORCH_SDPA attention backend out of potential backends: ['TORCH_SDPA']")
    logger.info("MoE router: softmax_topk, top-k kernel: torch.topk, top-%d of %d experts",
                model.TOP_K, model.N_EXPERTS)
    logger.info("Indexer top-k kernel: threshold_select, tie-break: %s", cfg.topk_tiebreak)
    logger.info("Reduction path: %s", reduction(cfg))
