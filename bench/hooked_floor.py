"""What a batch holding a flagged request costs in the hooked engine, in parts, in one process (no server, no
clients): the CPU time of one static batch of 8 requests of 64 tokens on an 8-layer tiny-llama (hidden 256, random
weights from a fixed seed, one intra-op thread), alternated round by round:
- none flagged (the model's own code);
- one flagged, its hooks doing nothing (the floor: what calling a Python hook on every module call costs);
- one flagged, digested (the hooks, the step's blocks, their hashes and reductions, until its digests are
  in the store, which keeps every flagged request's as a server's does), and the garbage collector's share of it.
Run it in the transformers-serve venv, from the project root:

    ~/.cache/orchestrator/transformers-serve-5.25.0/venv/bin/python bench/hooked_floor.py --rounds 5
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "arms" / "transformers-hooked"), str(ROOT / "arms" / "reference-engine")]
CACHE = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR") or Path.home() / ".cache" / "orchestrator")


def main() -> int:
    import torch
    from hookedengine.config import HookedConfig
    from hookedengine.digests import DigestStore, Recorder
    from hookedengine.engine import HookedEngine
    from refengine.engine import GenRequest
    from transformers import AutoConfig, AutoModelForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--base-model", type=Path, default=CACHE / "models" / "tiny-llama")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = AutoConfig.from_pretrained(args.base_model)
    cfg.num_hidden_layers = 8
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    store = DigestStore()
    engine = HookedEngine(HookedConfig(model=str(args.base_model)), model, None, 0, torch.device("cpu"), store)
    digested = engine.recorder

    class Floor(Recorder):  # type: ignore[misc]  # imported here, from the engine's venv
        """Hooks that do nothing."""

        def _hook(self, name: str, kind: str) -> Any:
            return lambda module, args, kwargs, output: None

    floor = Floor(model, 8, store)

    gc_s = [0.0, 0.0]  # the garbage collector's CPU time so far, and when its current collection started
    gc.callbacks.append(lambda phase, _info: gc_s.__setitem__(*((1, time.process_time()) if phase == "start" else
                                                               (0, gc_s[0] + time.process_time() - gc_s[1]))))
    serial = itertools.count()

    def batch(flag: bool, recorder: Recorder, n: int) -> tuple[float, float]:
        """(CPU s, of which garbage collection): each flagged request its own id, kept in the store as a server's."""
        engine.recorder, k = recorder, next(serial)
        reqs = [GenRequest(prompt_ids=[1, 2 + i, 3, 4, 5 + i][: 3 + i % 3], max_tokens=n, ignore_eos=True,
                           logprobs=5, digest=flag and i == 0, request_id=f"b{k}r{i}") for i in range(8)]
        start, gc0 = time.process_time(), gc_s[0]
        engine.run_batch(reqs)
        if flag:
            store.get(f"b{k}r0")
        return time.process_time() - start, gc_s[0] - gc0

    for flag, rec in ((False, digested), (True, floor), (True, digested)):
        batch(flag, rec, 8)  # warm-up
    plain, hooked, full = [], [], []
    for r in range(args.rounds):
        plain.append(batch(False, digested, args.tokens)[0])
        hooked.append(batch(True, floor, args.tokens)[0])
        full_s, full_gc_s = batch(True, digested, args.tokens)
        full.append(full_s)
        print(f"round {r + 1}: none flagged {plain[-1] * 1e3:.1f} ms CPU; one flagged, hooks doing nothing "
              f"{hooked[-1] * 1e3:.1f} ms (x{plain[-1] / hooked[-1]:.3f}); digested {full[-1] * 1e3:.1f} ms "
              f"(x{plain[-1] / full[-1]:.3f}; garbage collection {full_gc_s * 1e3:.1f} ms of it)", flush=True)

    def ratio(xs: list[float]) -> float:
        return statistics.median(p / x for p, x in zip(plain, xs, strict=True))

    print(f"a batch-mate's speed per CPU second (median of {args.rounds} rounds): hooks doing nothing "
          f"x{ratio(hooked):.3f}, digested x{ratio(full):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
