"""Which reader a source needs: `--kind`, or its files when they say it unambiguously (a detLLM trace or repro pack;
a position-parity evidence file; a folder of OpenAI answers). Each reader turns the source into `Evidence`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.imports import detllm, openai_json, parity
from orchestrator.imports.evidence import KINDS, Evidence

READERS: dict[str, Callable[..., Evidence]] = {"detllm": detllm.read, "openai-json": openai_json.read,
                                               "position-parity": parity.read}


def kind_of(source: Path) -> str:
    if not source.exists():
        raise UsageError(f"{source} does not exist: pass the other tool's output (a file or a folder)")
    if detllm.traces(source) and (source.is_dir() or source.suffix == ".jsonl"):
        return "detllm"
    if source.is_file() and source.suffix == ".json" and parity.is_evidence(_head(source)):
        return "position-parity"
    if source.is_dir() and any(source.glob("*.json")):
        return "openai-json"
    raise UsageError(f"{source}: cannot tell what wrote it; name it with --kind ({', '.join(KINDS)})")


def _head(path: Path) -> object:
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return None
