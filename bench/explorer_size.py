"""How large the report gets when many cells diverge: a synthetic record of --requests requests (default 10,000)
written with the record's own writer, every concurrent cell of the candidate arm split into --branches
signatures (more than the explorer shows) and half its prompts differing from the baseline; then the reports
are built as `compare` builds them, and their sizes printed.

    .venv/bin/python bench/explorer_size.py --workdir /tmp/explorer-size
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.analysis.gaps import top_gaps  # noqa: E402
from orchestrator.analysis.signatures import text_signature, token_ids_signature, top_logprobs_signature  # noqa: E402
from orchestrator.record.paths import RunPaths  # noqa: E402
from orchestrator.record.recorded import Recorded, read_run  # noqa: E402
from orchestrator.record.tables import TableWriter  # noqa: E402
from orchestrator.report.build import build  # noqa: E402

ARMS = ("base", "cand")
SEQUENTIAL, BATCHES, BATCH = 8, 2, 16  # per prompt and arm: 8 sequential requests, 2 batches of 16


def response(arm: str, prompt: int, phase: str, batch: int, repeat: int, tokens: list[int], top_k: int
             ) -> dict[str, Any]:
    top = [[{"token": f" w{(t + k) % 997}", "logprob": -0.05 - 0.4 * k - 1e-3 * (t % 7)} for k in range(top_k)]
           for t in tokens]
    text = "".join(e[0]["token"] for e in top)
    kind = "concurrent" if phase == "concurrent" else "sequential"
    step = 1000 * batch + (repeat % 4)  # a concurrent batch's requests overlap in the engine's steps
    return {"arm": arm, "prompt_id": f"p{prompt:04d}", "phase": phase, "phase_kind": kind, "batch_id": batch,
            "repeat": repeat, "request_id": f"{arm}/p{prompt:04d}/{phase}/{batch}/{repeat}", "role": "measured",
            "cold": False, "attempt": 0, "completion_text": text, "token_ids": tokens,
            "tokens": [e[0]["token"] for e in top], "token_logprobs": [e[0]["logprob"] for e in top],
            "top_logprobs": top, "top_gaps": top_gaps(top), "top_logprobs_entries": [top_k] * len(tokens),
            "server_first_step": step if kind == "concurrent" else None,
            "server_last_step": step + len(tokens) if kind == "concurrent" else None,
            "sig_text": text_signature(text), "sig_token_ids": token_ids_signature(tokens),
            "sig_top_logprobs": top_logprobs_signature(top)}


def generate(root: Path, requests: int, positions: int, top_k: int, branches: int) -> RunPaths:
    per_prompt = len(ARMS) * (SEQUENTIAL + BATCHES * BATCH)
    prompts = max(1, requests // per_prompt)
    paths = RunPaths(root).make()
    with TableWriter(paths, "responses", "bench", flush_rows=512, flush_s=1e9) as writer:
        for arm in ARMS:
            for prompt in range(prompts):
                base = [(prompt * 31 + i * 7) % 50_000 for i in range(positions)]
                if arm == "cand" and prompt % 2:  # half the candidate's prompts part from the baseline
                    base = [*base[:positions // 3], *(t + 1 for t in base[positions // 3:])]
                for repeat in range(SEQUENTIAL):
                    writer.append(response(arm, prompt, "sequential", 0, repeat, base, top_k))
                for batch in range(BATCHES):
                    for repeat in range(BATCH):
                        variant = (batch * BATCH + repeat) % branches if arm == "cand" else 0
                        split = (positions // 2 + 3 * variant) % positions
                        tokens = base if variant == 0 else [*base[:split], *(t + variant for t in base[split:])]
                        writer.append(response(arm, prompt, "concurrent", batch, repeat, tokens, top_k))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--positions", type=int, default=64, help="generated tokens per response")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--branches", type=int, default=6, help="signatures per divergent cell")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/explorer-size"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    paths = generate(args.workdir, args.requests, args.positions, args.top_k, args.branches)
    start = time.perf_counter()
    report = build(Recorded.of([read_run(paths, {"study": "explorer_size", "run_id": "bench", "baseline": "base"})]))
    seconds = time.perf_counter() - start
    result = report.comparison
    divergent = sum(c.distinct_signatures not in (None, 1) for c in result.cells)
    print(f"{sum(c.n for c in result.cells)} requests, {len(result.cells)} cells, {divergent} divergent, "
          f"{sum(p.verdict == 'differ' for p in result.pairs)} pairs differ; explored {len(result.explorer)} cells "
          f"and {len(result.pair_explorer)} pairs, {result.explorer_left_out} left out; reports built in "
          f"{seconds:.1f} s")
    for path in (paths.report_html, paths.report_md, paths.report_json):
        print(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
