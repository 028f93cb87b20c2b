"""The allocator perturbation and contention on a CUDA GPU (`pytest -m gpu tests/gpu/test_probe_allocator_gpu.py`
on the GPU machine; CI has none): the caching allocator replays the previous output's address when unperturbed,
never when perturbed; a second stream and a second process contend and are recorded."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_probe_allocator import cells, replayed

pytestmark = pytest.mark.gpu

GEMM = {"shapes": {"q_proj": [4096, 4096]}, "m": [1, 64, 4096], "repeats": 50, "hash_repeats": 1,
        "device": "cuda", "arms": ["bf16"], "backend": "scaled_mm"}


@pytest.fixture(scope="module", autouse=True)
def cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch sees none")


def ran(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in cells("gemm", spec) if c["kind"] == "cell"]


def test_the_caching_allocator_replays_unless_perturbed() -> None:
    alone = ran({**GEMM, "perturb_allocator": False})
    assert all(replayed(c["out_ptrs"]) >= 40 for c in alone), [c["out_ptrs"] for c in alone]  # of 48
    perturbed = ran({**GEMM, "perturb_allocator": True})
    assert all(replayed(c["out_ptrs"]) == 0 for c in perturbed), [c["out_ptrs"] for c in perturbed]


@pytest.mark.parametrize("way", ["stream", "process"])
def test_contention_on_the_gpu_is_recorded(way: str) -> None:
    rows = cells("gemm", {**GEMM, "contend": way})
    assert all(c["contend"] == way for c in rows if c["kind"] == "cell")
    assert rows[-1]["kind"] == "done" and rows[-1]["contend_matmuls"] >= 1
