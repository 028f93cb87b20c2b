"""detLLM's own `check` against an OpenAI-compatible server: a detLLM `BackendAdapter` that sends each prompt of a
batch to `/v1/completions` at once (the batch reaches the server together), greedy, with the answer's token ids
(`return_token_ids`: vLLM and the reference engine) and, at detLLM's tier 2, the chosen tokens' logprobs as
detLLM's `scores`. detLLM 0.1.1 has no such backend (hf and vllm in-process only); everything else, the traces,
the repro pack and the verdict, is detLLM's own code (`detllm.api.check`). Used to make the committed samples under
tests/data/import/ and the figures of docs/alternatives.md:

    python scripts/detllm_openai.py --url http://127.0.0.1:PORT --out DIR [--runs 3] [--tier 2]
        [--batch-size 1] [--vary-batch 4] [--max-new-tokens 16] PROMPT...
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from detllm.api import check
from detllm.backends.base import BackendCapabilities


class OpenAICompletions:
    """detLLM's BackendAdapter protocol (detllm/backends/base.py) over HTTP."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url.rstrip("/"), model

    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(supports_tier1_fixed_batch=True, supports_scores=True,
                                   supports_torch_deterministic=True, notes=["OpenAI-compatible server over HTTP"])

    def generate(self, prompts: list[str], max_new_tokens: int = 32, do_sample: bool = False,
                 capture_scores: bool = False) -> list[dict[str, Any]]:
        with ThreadPoolExecutor(max_workers=len(prompts)) as pool:  # one batch: sent together
            return list(pool.map(lambda p: self._one(p, max_new_tokens, capture_scores), prompts))

    def _one(self, prompt: str, max_new_tokens: int, capture_scores: bool) -> dict[str, Any]:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0.0,
                "return_token_ids": True, **({"logprobs": 1} if capture_scores else {})}
        answer = httpx.post(f"{self.url}/v1/completions", json=body, timeout=300).raise_for_status().json()
        choice = answer["choices"][0]
        logprobs = choice.get("logprobs") or {}
        return {"prompt": prompt, "input_ids": choice["prompt_token_ids"], "output_ids": choice["token_ids"],
                "scores": logprobs.get("token_logprobs") if capture_scores else None, "tokenizer_id": self.model}


def main(argv: list[str]) -> int:
    made = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--url", required=True)
    made.add_argument("--model", default="reference")
    made.add_argument("--out", required=True)
    made.add_argument("--runs", type=int, default=3)
    made.add_argument("--tier", type=int, default=1)
    made.add_argument("--batch-size", type=int, default=1)
    made.add_argument("--vary-batch", type=int, action="append", default=[])
    made.add_argument("--max-new-tokens", type=int, default=16)
    made.add_argument("prompts", nargs="+")
    a = made.parse_args(argv)
    report = check(backend="openai", model=a.model, prompts=a.prompts, tier=a.tier, runs=a.runs,
                   batch_size=a.batch_size, vary_batch=a.vary_batch, max_new_tokens=a.max_new_tokens,
                   out_dir=a.out, backend_adapter=OpenAICompletions(a.url, a.model))
    print(json.dumps(report.to_dict(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
