"""The fused-finalize patch for vLLM images, on module sources shaped like vLLM 0.34.0's and 0.11.0's."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PATCH = Path(__file__).resolve().parents[2] / "arms" / "vllm-nonfused" / "patch_fused_finalize.py"
spec = importlib.util.spec_from_file_location("patch_fused_finalize", PATCH)
assert spec and spec.loader
patch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patch)

VLLM_034 = '''from vllm.logger import init_logger
logger = init_logger(__name__)

def flashinfer_cutlass_fused_moe(*args, **kwargs):
    return kwargs

class FlashInferExperts:
    def apply(self, output, hidden_states):
        return flashinfer_cutlass_fused_moe(
            input=hidden_states,
            output=output,
        )
'''


def test_patch_passes_the_keyword_and_logs_the_marker(tmp_path: Path) -> None:
    patched = patch.patch_source(VLLM_034)
    assert "use_fused_finalize=False," in patched and patch.MARKER in patched
    assert patch.patch_source(patched) == patched  # idempotent
    module = tmp_path / "flashinfer_cutlass_moe.py"
    module.write_text(patched.replace("from vllm.logger import init_logger\nlogger = init_logger(__name__)",
                                      "import logging\nlogging.basicConfig(level=logging.INFO)\n"
                                      "logger = logging.getLogger('vllm')"))
    run = subprocess.run([sys.executable, "-c", "import flashinfer_cutlass_moe as m; "
                          "print(m.FlashInferExperts().apply('o', 'h'))"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "'use_fused_finalize': False" in run.stdout and patch.MARKER in run.stderr


def test_patch_refuses_what_it_cannot_patch() -> None:
    with pytest.raises(ValueError, match="no call"):
        patch.patch_source("def f():\n    return 1\n")
    with pytest.raises(ValueError, match="already passes"):
        patch.patch_source(VLLM_034.replace("output=output,", "output=output, use_fused_finalize=True,"))
