"""detLLM's output (the `detllm` package, 0.1.x) as evidence: a `detllm check` folder (its repro pack: run_config.json,
traces/run_K.jsonl, traces/batch_N.jsonl, report.json), a `detllm run` folder (trace.jsonl) or one trace file. A trace
line is detLLM's `TokenTraceRow` (detllm/core/models.py): prompt_id (sha256 of the prompt text), input_token_ids,
generated_token_ids, scores (tier 2: each chosen token's logprob; null at tier 1), decoding_* fields.

The runs of a check are arm `detllm`, one repeat each; each `--vary-batch` size's trace is arm `batch_N` (detLLM
diffs it against run 0, so it is compared against the baseline here too). detLLM decodes greedily, so a score is the
top-1 logprob: it becomes a one-entry top-logprobs list and the signature is on it, as detLLM's tier 2 compares
scores; at tier 1 the signature is on the token ids."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.engines import ParsedCompletion
from orchestrator.imports.evidence import Answer, Evidence, bad

BASELINE = "detllm"
_FIX = "pass a `detllm check` or `detllm run` folder, or one of its traces/*.jsonl"


def traces(source: Path) -> list[tuple[str, Path]]:
    """(arm, trace file) of a detLLM folder or file, runs first; [] when it holds none."""
    if source.is_file():
        return [(BASELINE, source)]
    runs = sorted(source.glob("traces/run_*.jsonl"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    if not runs and (source / "trace.jsonl").is_file():
        runs = [source / "trace.jsonl"]
    batches = sorted(source.glob("traces/batch_*.jsonl"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    return [(BASELINE, p) for p in runs] + [(p.stem, p) for p in batches]


def read(source: Path) -> Evidence:
    found = traces(source)
    if not found:
        raise bad(source, "no detLLM trace in it (traces/run_K.jsonl or trace.jsonl)", _FIX)
    config = _json(source / "run_config.json") if source.is_dir() else {}
    report = _json(source / "report.json") if source.is_dir() else {}
    counts: Counter[tuple[str, str]] = Counter()
    answers, prompts, scored, stripped = [], {}, [], 0
    for arm, path in found:
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if not line.strip():
                continue
            row = _row(path, number, line)
            sha = row["prompt_id"]
            pid = sha[:12]
            prompts[pid] = {"text": None, "sha256": sha}
            ids, prompt = row["generated_token_ids"], row["input_token_ids"]
            if prompt and ids[:len(prompt)] == prompt:  # detLLM's hf backend keeps the prompt in front
                ids, stripped = ids[len(prompt):], stripped + 1
            scores = row.get("scores")
            scored.append(scores is not None)
            top: list[list[dict[str, Any]] | None] | None = None if scores is None else [
                [{"token": f"token_id:{t}", "logprob": s}] for t, s in zip(ids, scores, strict=True)]
            parsed = ParsedCompletion(prompt_tokens=len(prompt), completion_tokens=len(ids), token_ids=ids,
                                      token_logprobs=scores, top_logprobs=top)
            answers.append(Answer(arm, pid, sha, "runs", counts[arm, pid], None, line, parsed))
            counts[arm, pid] += 1
    arms = {arm: {"tool": "detLLM", "trace": str(path.relative_to(source)) if source.is_dir() else path.name,
                  "batch_size": int(arm.removeprefix("batch_")) if arm != BASELINE else config.get("batch_size"),
                  **{k: config[k] for k in ("backend", "model", "tier_effective", "mode", "dtype", "device",
                                            "decoding") if k in config}} for arm, path in found}
    lacks = ["no completion text", "no server logs", "no send or receive times", "no HTTP answer",
             "no engine fingerprint (detLLM's env.json is kept under imported/)"]
    lacks.insert(0, "no top-k logprobs (tier 2: the chosen token's only)" if any(scored)
                 else "no logprobs (tier 1: token ids only)")
    notes = [f"detLLM's verdict: {report['status']} {report['category']}"] if "status" in report else []
    if stripped:
        notes.append(f"{stripped} traces held the prompt before the generated ids: stripped")
    return Evidence("detLLM", config.get("detllm_version") or report.get("detllm_version"), "detllm", "detllm",
                    BASELINE, arms, answers, prompts, tuple(lacks), tuple(notes))


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(path, f"not JSON ({exc})", "copy the detLLM folder again from its source") from None
    if not isinstance(loaded, dict):
        raise bad(path, "not a JSON object", "copy the detLLM folder again from its source")
    return loaded


def _row(path: Path, number: int, line: bytes) -> dict[str, Any]:
    """A trace line, checked: the fields the record needs, of their types."""
    where = path.with_name(f"{path.name}:{number}")
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(where, f"not a JSON line ({exc})", _FIX) from None
    if not isinstance(row, dict):
        raise bad(where, "not a JSON object", _FIX)
    checks: dict[str, Callable[[Any], bool]] = {
              "prompt_id": lambda v: isinstance(v, str) and bool(re.fullmatch(r"[0-9a-f]{64}", v)),
              "input_token_ids": _ints, "generated_token_ids": _ints,
              "scores": lambda v: v is None or (isinstance(v, list) and all(
                  isinstance(s, int | float) and not isinstance(s, bool) for s in v))}
    wrong = [name for name, ok in checks.items() if not ok(row.get(name))]
    if wrong:
        raise bad(where, f"not a detLLM trace row: {', '.join(wrong)} missing or of the wrong type", _FIX)
    if row["scores"] is not None and len(row["scores"]) != len(row["generated_token_ids"]) - (
            len(row["input_token_ids"]) if row["generated_token_ids"][:len(row["input_token_ids"])]
            == row["input_token_ids"] else 0):
        raise bad(where, "scores and generated_token_ids differ in length", _FIX)
    return row


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
