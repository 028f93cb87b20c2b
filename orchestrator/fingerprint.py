"""What a running arm really is: facts read from the server and from its startup log.

The patterns cover vLLM's startup lines (see VLLM-FACTS.md section 5) and the reference engine's,
which mimics them. A fact that no line states is absent, never guessed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

LOG_PATTERNS: dict[str, str] = {
    "engine_version": r"(?:vLLM server version|refengine version) ([^,\s]+)",
    "moe_backend": r"Using '?(.+?)'? (?:Unquantized|Fp8|NvFp4|Mxfp4|Mxfp8|Int8|WNA16) MoE (?:LoRA )?backend",
    "moe_backend_requested": r"MoE backend requested: (\S+)",
    "attention_backend": r"Using (\S+) attention backend",
    "fused_finalize": r"Fused finalize: (on|off)",
    "batch_invariant": r"Batch invariant: (on|off)",
    "indexer_budget": r"Indexer budget: (\d+)",
    "topk_tiebreak": r"top-k tie-break: (\w+)",
    "autotune_key": r"Autotune cache key: (\S+)",
    "autotune_file": r"Using FlashInfer autotune cache file: (\S+?)\.?(?:\s|$)",
    "autotune_entry_finalize": r"Loaded autotune entry tuned for finalize=(\w+)",
    "max_model_len": r"Using max model len (\d+)",
}
_COMPILED = {name: re.compile(pattern) for name, pattern in LOG_PATTERNS.items()}


def log_facts(lines: Iterable[str]) -> dict[str, str]:
    """The first match of each pattern, in log order."""
    facts: dict[str, str] = {}
    for line in lines:
        for name, pattern in _COMPILED.items():
            if name not in facts and (match := pattern.search(line)):
                facts[name] = match.group(1)
    return facts


def matrix_key(image_id: str, fingerprint: dict[str, Any]) -> str:
    """Short stable hash of what defines "the same cell" across machines."""
    material = {"image_id": image_id, "version": fingerprint.get("version"),
                "engine_version": fingerprint.get("log_facts", {}).get("engine_version")}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
