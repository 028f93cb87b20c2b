"""Patch vLLM's FlashInfer CUTLASS MoE call to pass use_fused_finalize=False, and make the module log
a line that proves it at import (the orchestrator reads it from the startup log).

Usage: python3 patch_fused_finalize.py [PATH_TO_flashinfer_cutlass_moe.py]   (default: found in vllm)
Exits non-zero, saying why, when the file or the call is not found or FlashInfer lacks the argument.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

MARKER = "Non-fused finalize patch active: use_fused_finalize=False"
CANDIDATES = ("model_executor/layers/fused_moe/experts/flashinfer_cutlass_moe.py",  # 0.34.0
              "model_executor/layers/fused_moe/flashinfer_cutlass_moe.py")  # 0.11.0, 0.20.0
# A call (not the `def` of a wrapper): every one in the module gets the keyword.
CALL = re.compile(r"^(?P<indent>[ \t]*)(?!def )(?P<head>[^\n]*?\bflashinfer_cutlass_fused_moe\()", re.MULTILINE)


def find_module() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vllm is not importable in this image")
    root = Path(next(iter(spec.submodule_search_locations)))
    for candidate in CANDIDATES:
        if (root / candidate).is_file():
            return root / candidate
    sys.exit(f"none of {CANDIDATES} exists under {root}: this vLLM version is not supported by the patch")


def patch_source(source: str) -> str:
    if MARKER in source:
        return source  # already patched
    if "use_fused_finalize" in source:
        raise ValueError("the module already passes use_fused_finalize: patch by hand")
    # Insert the keyword right after each opening parenthesis: valid whatever follows.
    patched, count = CALL.subn(lambda m: f"{m[0]}\n{m['indent']}    use_fused_finalize=False,", source)
    if count == 0:
        raise ValueError("no call to flashinfer_cutlass_fused_moe( found")
    # vLLM modules keep `logger = init_logger(__name__)`; fall back to the vllm logger.
    return patched + ("\n\n(globals().get('logger') or __import__('logging').getLogger('vllm'))"
                      f".info({MARKER!r})\n")


def flashinfer_accepts_argument() -> bool | None:
    try:
        import inspect

        import flashinfer.fused_moe as fused_moe
    except Exception:
        return None  # cannot tell here (no GPU libraries at build time); the log line still proves the patch
    return "use_fused_finalize" in inspect.signature(fused_moe.cutlass_fused_moe).parameters


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else find_module()
    if flashinfer_accepts_argument() is False:
        sys.exit("this image's FlashInfer has no use_fused_finalize (needs >= 0.6.15, vLLM >= 0.28.0)")
    try:
        path.write_text(patch_source(path.read_text()))
    except ValueError as exc:
        sys.exit(f"{path}: {exc}")
    print(f"patched {path}")


if __name__ == "__main__":
    main()
