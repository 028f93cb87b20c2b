"""A position-parity evidence file as ZC502's vllm-position-parity collector writes it (its canonical schema 0.1:
`run` with arm, execution_mode, repeats, prompt_logprobs_k; `prompt` with sha256 and token_count; `samples`, one per
repeat, each with its prompt positions: the forced token, its logprob and the top-k sorted by logprob, and its
completion_token_ids) as evidence. One file is one arm, one prompt, one execution mode: a cell. Its prompt positions
become the record's `prompt_logprobs` (the forced token first, rank unknown, then the top k with ranks 1..k, as
analysis/positions.py reads vLLM's), its completion token ids the signature."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.engines import ParsedCompletion
from orchestrator.imports.evidence import Answer, Evidence, bad

SCHEMA = "0.1"
_FIX = "pass one evidence file that vllm-position-parity's collector wrote (schema 0.1)"


def is_evidence(doc: object) -> bool:
    return isinstance(doc, dict) and {"schema_version", "run", "prompt", "samples"} <= doc.keys()


def read(source: Path) -> Evidence:
    try:
        doc = json.loads(source.read_bytes()) if source.is_file() else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(source, f"not JSON ({exc})", _FIX) from None
    if not isinstance(doc, dict) or not is_evidence(doc):
        raise bad(source, "not position-parity evidence (schema_version, run, prompt, samples)", _FIX)
    if doc["schema_version"] != SCHEMA:
        raise bad(source, f"schema_version {doc['schema_version']!r}, this reader knows {SCHEMA!r}", _FIX)
    run, prompt, samples = doc["run"], doc["prompt"], doc["samples"]
    if not (isinstance(run, dict) and isinstance(run.get("arm"), str) and isinstance(prompt, dict)
            and isinstance(prompt.get("sha256"), str) and isinstance(samples, list) and samples):
        raise bad(source, "run.arm, prompt.sha256 or samples missing or of the wrong type", _FIX)
    mode = str(run.get("execution_mode") or "other")
    k = run.get("prompt_logprobs_k") if isinstance(run.get("prompt_logprobs_k"), int) else None
    pid = prompt["sha256"][:12]
    answers = [_answer(source, run["arm"], pid, prompt, mode, k, i, s) for i, s in enumerate(samples)]
    lacks = ["no completion text", "no generated-token logprobs", "no server logs", "no send or receive times",
             "no batch membership (concurrent samples read as repeats)"]
    if all(not a.parsed.token_ids for a in answers):
        lacks.insert(1, "no completion token ids (no signature: prompt positions only)")
    config = {key: run.get(key) for key in ("model", "execution_mode", "repeats", "request_concurrency",
                                            "temperature", "max_tokens", "prompt_logprobs_k", "seed")}
    return Evidence("vllm-position-parity", doc.get("collector_version"), "position-parity", run["arm"], run["arm"],
                    {run["arm"]: {"tool": doc.get("tool"), **config}}, answers,
                    {pid: {"text": None, "sha256": prompt["sha256"]}}, tuple(lacks),
                    tuple(f"collection warning: {w}" for w in doc.get("collection_warnings") or []))


def _answer(source: Path, arm: str, pid: str, prompt: dict[str, Any], mode: str, k: int | None, index: int,
            sample: Any) -> Answer:
    where = source.with_name(f"{source.name}: samples[{index}]")
    try:
        positions = [_position(p, k) for p in sample["positions"]]
        ids = [int(i) for i in sample.get("completion_token_ids") or []] or None
        repeat = int(sample["repeat_index"])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(where, f"malformed ({type(exc).__name__}: {exc})", _FIX) from None
    parsed = ParsedCompletion(prompt_tokens=prompt.get("token_count"), token_ids=ids,
                              completion_tokens=None if ids is None else len(ids), prompt_logprobs=positions)
    return Answer(arm, pid, prompt["sha256"], mode, repeat, None, json.dumps(sample, sort_keys=True).encode(), parsed)


def _position(position: dict[str, Any], k: int | None) -> list[dict[str, Any]] | None:
    if position["forced_logprob"] is None:
        return None
    forced = int(position["forced_token_id"])
    top = position["topk"][:k] if k and k > 0 else position["topk"]
    return [{"token_id": forced, "token": None, "logprob": float(position["forced_logprob"]), "rank": None},
            *({"token_id": int(t["token_id"]), "token": None, "logprob": float(t["logprob"]), "rank": rank}
              for rank, t in enumerate(top, 1))]
