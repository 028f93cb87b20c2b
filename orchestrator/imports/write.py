"""Evidence written as a run dir: the responses and arms tables under the record's schemas (record/schemas.py: a
value of the wrong type is refused, not coerced), an empty logs table, prompts.json, run.json with the provenance
(`imported`: tool, version, kind, source path, sha256, what the source lacks), and the source itself, verbatim, under
RUN/imported/. `compare`, `show`, `ls` and the explorer read it as any run dir."""

from __future__ import annotations

import json
import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from orchestrator.analysis import signatures
from orchestrator.analysis.gaps import top_gaps
from orchestrator.errors import UsageError
from orchestrator.imports.evidence import Answer, Evidence, digest
from orchestrator.record.paths import RunPaths, atomic_write_text
from orchestrator.record.tables import TableWriter

SOURCE_DIR = "imported"  # RUN/imported/<the source's name>: the source as it was


def write(evidence: Evidence, source: Path, out: Path) -> RunPaths:
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out} exists and is not empty: name a new run dir (import writes a whole one)")
    paths = RunPaths(out).make()
    run_id = f"{out.name}-{secrets.token_hex(3)}"
    kept = out / SOURCE_DIR / source.name
    kept.parent.mkdir()
    (shutil.copytree if source.is_dir() else shutil.copy2)(source, kept)
    try:
        with TableWriter(paths, "responses", "imported", flush_rows=4096) as responses:
            order = {arm: i for i, arm in enumerate(evidence.arms)}  # a cell's rows together, as readers need them
            for index, answer in sorted(enumerate(evidence.answers), key=lambda ia: (
                    order[ia[1].arm], ia[1].prompt_id, ia[1].phase, ia[1].repeat)):
                responses.append(_row(evidence, run_id, index, answer))
        with TableWriter(paths, "arms", "imported") as arms:
            for arm, config in evidence.arms.items():
                arms.append(_arm(evidence, run_id, arm, config))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise UsageError(f"{source}: a value does not fit the record's schema ({exc}); the source is malformed, "
                         "copy it again from the tool that wrote it") from None
    atomic_write_text(paths.prompts_json, json.dumps(evidence.prompts, indent=2, ensure_ascii=False) + "\n")
    meta = {"study": evidence.study, "run_id": run_id, "baseline": evidence.baseline,
            "planned_arms": list(evidence.arms), "near_tie_gap": 0.01,
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "imported": provenance(evidence, source, kept.relative_to(out))}
    atomic_write_text(paths.meta, json.dumps(meta, indent=2) + "\n")
    return paths


def provenance(evidence: Evidence, source: Path, kept: Path) -> dict[str, Any]:
    return {"tool": evidence.tool, "version": evidence.version, "kind": evidence.kind,
            "source": str(source.resolve()), "sha256": digest(source), "kept": kept.as_posix(),
            "lacks": list(evidence.lacks), "notes": list(evidence.notes)}


def _row(evidence: Evidence, run_id: str, index: int, answer: Answer) -> dict[str, Any]:
    parsed, top = answer.parsed, answer.parsed.top_logprobs
    return {
        "study": evidence.study, "run_id": run_id, "arm": answer.arm, "prompt_id": answer.prompt_id,
        "phase": answer.phase, "phase_kind": answer.phase_kind, "batch_id": 0, "repeat": answer.repeat,
        "request_index": index, "cold": False, "request_id": f"{answer.arm}/{answer.prompt_id}/{answer.phase}/0/"
        f"{answer.repeat}", "attempt": 0, "role": "measured", "start": 0, "prompt_sha256": answer.prompt_sha256,
        "prompt_chars": answer.prompt_chars, "prompt_tokens": parsed.prompt_tokens,
        "cached_prompt_tokens": parsed.cached_prompt_tokens, "request_json": answer.request_json,
        "response_body": answer.body, "error": parsed.error, "error_kind": "answer" if parsed.error else None,
        "completion_text": parsed.completion_text, "finish_reason": parsed.finish_reason,
        "completion_tokens": parsed.completion_tokens, "token_ids": parsed.token_ids, "tokens": parsed.tokens,
        "token_logprobs": parsed.token_logprobs, "top_logprobs": top, "top_gaps": top_gaps(top),
        "top_logprobs_entries": None if top is None else [None if p is None else len(p) for p in top],
        "prompt_logprobs": parsed.prompt_logprobs,
        "sig_text": None if parsed.error else signatures.text_signature(parsed.completion_text),
        "sig_token_ids": None if parsed.error else signatures.token_ids_signature(parsed.token_ids),
        "sig_top_logprobs": None if parsed.error else signatures.top_logprobs_signature(top),
        "sig_logprob_vector": None if parsed.error else signatures.logprob_vector_signature(parsed.token_logprobs,
                                                                                             top),
    }


def _arm(evidence: Evidence, run_id: str, arm: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"study": evidence.study, "run_id": run_id, "arm": arm, "start": 0, "attempt": 0,
            "config_json": json.dumps(config, sort_keys=True), "image_ref": f"imported:{evidence.kind}",
            "status": "completed", "model": config.get("model")}
