"""`length_tokens: N` where the engine serves no tokenize endpoint (run/send/prompt_length.py): run inside the arm
as `python -c SOURCE PAYLOAD MODEL` with its own interpreter, offline. PAYLOAD is base64 of zlib of JSON
{"prompts": {id: [text, N]}} (compressed: an argument holds at most 128 KiB, and the texts are repeats); MODEL the
folder, an argument of its own, which a process arm's runtime maps as it maps the arm's argv (/models/x: the host
folder). For each prompt it prints the text of its first tokens that the model's tokenizer, called as a
server calls it (special tokens added), counts as exactly N, with those ids:
{"prompts": {id: {"text": ..., "ids": [...]}}}; {"error": ...} when it cannot.

May import: the standard library and `transformers`; nothing of the orchestrator.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import zlib
from typing import Any

TRIES = 8  # decode and re-encode need not round-trip: nudge the cut this many times


def exact(tokenizer: Any, text: str, n: int) -> dict[str, Any]:
    content = tokenizer(text, add_special_tokens=False)["input_ids"]
    cut = n - tokenizer.num_special_tokens_to_add()
    for _ in range(TRIES):
        if cut < 0 or cut > len(content):
            break
        candidate = tokenizer.decode(content[:cut])
        ids = tokenizer(candidate)["input_ids"]
        if len(ids) == n:
            return {"text": candidate, "ids": list(ids)}
        cut += n - len(ids)
    raise ValueError(f"no cut of its {len(content)} tokens counts exactly {n} (text too short, or the "
                     "tokenizer does not round-trip it)")


def answer(tokenizer: Any, prompts: dict[str, list[Any]]) -> dict[str, Any]:
    """{"prompts": {id: exact(...)}}, or {"error": ...} for the first prompt that has no such cut."""
    out = {}
    for prompt_id, (text, n) in prompts.items():
        try:
            out[prompt_id] = exact(tokenizer, text, n)
        except ValueError as exc:
            return {"error": f"prompt '{prompt_id}': {exc}"}
    return {"prompts": out}


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    request, model = json.loads(zlib.decompress(base64.b64decode(sys.argv[1]))), sys.argv[2]
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception as exc:  # an image without transformers, or no tokenizer files in the folder
        print(json.dumps({"error": f"no tokenizer from {model}: {type(exc).__name__}: {exc}"}))
        return 0
    print(json.dumps(answer(tokenizer, request["prompts"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
