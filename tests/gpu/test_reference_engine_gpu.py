"""The GPU checks of docs/gpu-validation.md, as tests (`pytest -m gpu` on a machine with a CUDA GPU; CI has none):
the reference engine as a local process on the GPU, each mechanism switched on detected, and nothing without
one. Skipped where torch sees no CUDA device."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

# bench/gpu_engine_check.py prints one line per setting
LINE = re.compile(r"^(?P<name>.+?)\s+sequential (?P<seq>\d+) distinct in \d+; concurrent (?P<conc>\d+) in \d+; "
                  r"seq vs conc (?P<versus>identical|differ); cold (?P<cold>matches|differs from) warm;")


@pytest.fixture(scope="module")
def cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch sees none")


@pytest.mark.usefixtures("cuda")
def test_each_reference_engine_mechanism_is_detected_on_the_gpu_and_none_with_all_off() -> None:
    """The documented command and its table: 8 sequential then 8 concurrent identical requests per setting."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'arms' / 'reference-engine'}"}
    done = subprocess.run([sys.executable, "bench/gpu_engine_check.py", "--device", "cuda", "--repeats", "8"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {m["name"]: (int(m["seq"]), int(m["conc"]), m["versus"], m["cold"])
            for m in map(LINE.match, done.stdout.splitlines()) if m}
    assert rows["all off"] == (1, 1, "identical", "matches")
    assert rows["fused finalize"][:2] == (8, 8)  # the order of its reduction changes every call
    assert rows["top-k random, budget 64"][:2] == (8, 8)  # the prompt is longer than the budget
    assert rows["batch invariance off"] == (1, 1, "differ", "matches")  # each batch shape repeatable, not alike
    assert rows["autotune, fresh cache"][1] == 1 and rows["autotune, fresh cache"][3] == "differs from"
