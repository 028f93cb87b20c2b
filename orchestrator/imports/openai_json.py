"""A folder of raw OpenAI-style answers (`/v1/completions` or `/v1/chat/completions`), one JSON file per response as
`curl -o` saves them, as evidence. Which prompt an answer belongs to, first found wins:
1. `--prompts MAP.json`, when given: {answer file name: prompt id};
2. the request body saved beside it, `NAME.request.json` next to `NAME.json` (its `prompt`, or its chat `messages`);
3. the prompt in the answer itself: a top-level `prompt` string, or the prompt's token ids (`prompt_token_ids`, as
   vLLM and the reference engine return them with `return_token_ids`).
An answer with none of them is refused, naming the file. Answers of one prompt are its repeats, in file-name order
(numbers in names sorted as numbers); one arm per `model` the answers name (or `--arm`). Each body is parsed as the
orchestrator parses a live answer (engines/dialect.py, the profile of a server of one's own)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from orchestrator.engines import OWN_SERVER_ENGINE, profile_for
from orchestrator.imports.evidence import Answer, Evidence, bad

REQUEST = ".request.json"
SENT_FIX = "save the request body exactly as it was sent"
_FIX = "save the request body beside it as NAME.request.json, or pass --prompts MAP.json ({file name: prompt id})"


def read(source: Path, prompts: Path | None = None, arm: str | None = None) -> Evidence:
    if not source.is_dir():
        raise bad(source, "not a folder", "pass the folder holding one JSON answer per file")
    files = sorted((p for p in source.glob("*.json") if not p.name.endswith(REQUEST)), key=_natural)
    if not files:
        raise bad(source, "no *.json answer in it", "pass the folder holding one JSON answer per file")
    mapping = _mapping(prompts) if prompts else {}
    dialect = profile_for(OWN_SERVER_ENGINE)
    counts: Counter[tuple[str, str]] = Counter()
    answers, texts, beside, models = [], {}, 0, set()
    for path in files:
        body = path.read_bytes()
        doc = _object(path, body)
        if "choices" not in doc and "error" not in doc:
            raise bad(path, "not an OpenAI completion or chat answer (no `choices`)", "pass a folder of answers only")
        request = path.with_name(path.name.removesuffix(".json") + REQUEST)
        sent = _object(request, request.read_bytes(), SENT_FIX) if request.is_file() else None
        beside += sent is not None
        text, sha, pid = _prompt(path, doc, sent, mapping)
        name = arm or str(doc.get("model") or "openai")
        models.add(name)
        parsed = dialect.parse(body)
        texts[pid] = {"text": text, "sha256": sha}
        answers.append(Answer(name, pid, sha, "answers", counts[name, pid],
                              request.read_text(encoding="utf-8") if sent is not None else None, body, parsed,
                              None if text is None else len(text)))
        counts[name, pid] += 1
    has = {what: any(getattr(a.parsed, what) is not None for a in answers)
           for what in ("top_logprobs", "token_ids", "prompt_logprobs")}
    lacks = [words for what, words in (("top_logprobs", "no top-k logprobs"), ("token_ids", "no token ids"))
             if not has[what]]
    lacks += ["no request bodies"] * (beside < len(files)) + [
        "no server logs", "no send or receive times", "no engine fingerprint"]
    first = sorted(models)[0]
    notes = (f"{len(files)} answers, {len(texts)} prompts, {len(models)} arms; grouped by "
             f"{'--prompts' if mapping else 'the requests beside them' if beside == len(files) else 'their prompts'}",)
    return Evidence("OpenAI-compatible answers", None, "openai-json", source.name, first,
                    {m: {"tool": "OpenAI-compatible answers", "model": m} for m in sorted(models)}, answers, texts,
                    tuple(lacks), notes)


def _prompt(path: Path, doc: dict[str, Any], sent: dict[str, Any] | None,
            mapping: dict[str, str]) -> tuple[str | None, str | None, str]:
    """(text, sha256, prompt id) of an answer's prompt."""
    if path.name in mapping:
        return None, None, mapping[path.name]
    if mapping:
        raise bad(path, "not in the --prompts map", "add its file name to the map")
    text = None
    if sent is not None:
        text = sent.get("prompt") if isinstance(sent.get("prompt"), str) else (
            json.dumps(sent["messages"], sort_keys=True, ensure_ascii=False) if "messages" in sent else None)
        if text is None:
            raise bad(path.with_name(path.name.removesuffix(".json") + REQUEST), "no `prompt` string or `messages`",
                      SENT_FIX)
    elif isinstance(doc.get("prompt"), str):
        text = doc["prompt"]
    if text is not None:
        sha = hashlib.sha256(text.encode()).hexdigest()
        return text, sha, sha[:12]
    choices = doc.get("choices") or [{}]
    ids = doc.get("prompt_token_ids") or (choices[0].get("prompt_token_ids") if isinstance(choices[0], dict) else None)
    if isinstance(ids, list) and ids:
        sha = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
        return None, None, f"ids-{sha[:12]}"
    raise bad(path, "its prompt is unknown (no request beside it, no prompt or prompt_token_ids in it)", _FIX)


def _mapping(path: Path) -> dict[str, str]:
    fix = 'pass --prompts a JSON map of answer file name to prompt id: {"a.json": "capital", ...}'
    if not path.is_file():
        raise bad(path, "no such file", fix)
    loaded = _object(path, path.read_bytes(), fix)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()):
        raise bad(path, "not a map of file name to prompt id (strings)", fix)
    return dict(loaded)


def _object(path: Path, body: bytes, fix: str = "pass the answer exactly as it was received") -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(path, f"not JSON ({exc})", fix) from None
    if not isinstance(doc, dict):
        raise bad(path, f"JSON {type(doc).__name__}, not an object", fix)
    return doc


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]
