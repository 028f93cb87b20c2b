"""The hooked engine's batch-invariant kernels (hookedengine/invariant.py) on the CPU, without Transformers: a row's
output is the same bits in a batch of 16 as alone, for each op the kernels replace (matmul by both of torch's
paths, mean, softmax, log-softmax) and for the attention with left padding; close to torch's own; where torch's
default is not invariant on this CPU (tiny-llama's down_proj GEMM, the one `locate` names in tests/e2e/test_locate.py;
the eager attention of a left-padded row) the test says so. Through the engine: tests/e2e/test_hooked_kernels.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hookedengine import invariant
from hookedengine.cli import main


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def test_tree_sum_is_the_same_with_zeros_on_the_left_and_whatever_the_rows() -> None:
    default_differs = False
    for n in (1, 7, 100, 1000, 4096):
        x = torch.randn(16, n)
        alone = invariant.tree_sum(x[5:6])
        assert torch.equal(invariant.tree_sum(x)[5:6], alone)
        for pads in (1, 3, 5, 8, 13, 100):  # a left-padded row: its pads add nothing
            padded = torch.cat([torch.zeros(16, pads), x], dim=1)
            assert torch.equal(invariant.tree_sum(padded)[5:6], alone), (n, pads)
            default_differs |= not torch.equal(padded.sum(-1), x.sum(-1))
        assert torch.allclose(alone, x[5:6].double().sum(-1).float(), rtol=1e-5, atol=1e-4)
    assert default_differs  # torch's own sum groups a row's elements by where they lie
    assert str(invariant.tree_sum(torch.tensor([[-0.0, -0.0]])).item()) == "0.0"  # never -0.0


def test_a_rows_linear_is_the_same_in_a_batch_of_16_as_alone_by_both_matmul_paths() -> None:
    x, w, bias = torch.randn(16, 15, 512), torch.randn(256, 512), torch.randn(256)
    default_full = F.linear(x, w)
    defaults_differ = any(not torch.equal(default_full[i:i + 1], F.linear(x[i:i + 1], w)) for i in range(16))
    with invariant.kernels():
        full = F.linear(x, w)
        for i in (0, 7, 15):
            assert torch.equal(full[i:i + 1], F.linear(x[i:i + 1], w))  # mm: [240, K] against [15, K]
            assert torch.equal(full[i:i + 1, 3:4], F.linear(x[i:i + 1, 3:4], w))  # one token
            assert torch.equal(full[i:i + 1, 3:9], F.linear(x[i:i + 1, 3:9], w))  # not flattened: the bmm path
        assert torch.equal(F.linear(x, w, bias)[2], F.linear(x[2], w, bias))  # addmm
        assert torch.equal(torch.bmm(x, w.t().expand(16, -1, -1))[4], (x[4] @ w.t()))
    assert torch.allclose(full, default_full, rtol=1e-4, atol=1e-4)
    assert defaults_differ  # tiny-llama's down_proj shape: torch's GEMM here gives M=240 other bits than M=15
    assert torch.equal(F.linear(x, w), default_full)  # off again: torch's own kernels


def test_mean_softmax_and_log_softmax_rows_are_the_same_in_a_batch_as_alone() -> None:
    h, logits = torch.randn(16, 9, 256), torch.randn(16, 1000)
    with invariant.kernels():
        var = h.pow(2).mean(-1, keepdim=True)  # RMSNorm's
        assert torch.equal(var[3:4, 2:3], h[3:4, 2:3].pow(2).mean(-1, keepdim=True))
        lsm, sm = logits.log_softmax(-1), torch.softmax(logits, -1)
        assert torch.equal(lsm[11:12], logits[11:12].log_softmax(-1))
        assert torch.equal(sm[11:12], torch.softmax(logits[11:12], -1))
        assert torch.equal(torch.softmax(logits.t(), 0)[:, 11], sm[11])  # over another dim
        whole = h.mean(dim=(0, 2))
        half = logits.to(torch.bfloat16).log_softmax(-1)
    assert torch.allclose(var, h.pow(2).mean(-1, keepdim=True), rtol=1e-5)
    assert torch.allclose(whole, h.mean(dim=(0, 2)), atol=1e-6)
    assert torch.allclose(lsm, logits.log_softmax(-1), atol=1e-5) and torch.allclose(sm, torch.softmax(logits, -1))
    assert half.dtype == torch.bfloat16


class _Attn:
    num_key_value_groups = 2


def _mask(lens: list[int], width: int) -> torch.Tensor:
    """The eager attention's additive mask of a left-padded prefill: causal, the pads masked."""
    m = torch.full((len(lens), 1, width, width), torch.finfo(torch.float32).min)
    for j, n in enumerate(lens):
        for q in range(width - n, width):
            m[j, 0, q, width - n:q + 1] = 0
    return m


def test_attention_of_a_left_padded_row_is_the_same_as_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    lens, width, scaling = [5, 9, 3, 9], 9, 0.125
    q, k, v = torch.randn(4, 4, width, 64), torch.randn(4, 2, width, 64), torch.randn(4, 2, width, 64)
    out, weights = invariant.attention(_Attn, q, k, v, _mask(lens, width), scaling)
    assert weights is None and out.shape == (4, width, 4, 64)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    eager = (torch.softmax(q @ kk.transpose(2, 3) * scaling + _mask(lens, width), -1) @ vv).transpose(1, 2)
    eager_differs = False
    for j, n in enumerate(lens):
        p = width - n
        alone, _ = invariant.attention(_Attn, q[j:j + 1, :, p:], k[j:j + 1, :, p:], v[j:j + 1, :, p:], _mask([n], n),
                                       scaling)
        assert torch.equal(alone[0], out[j, p:]), j
        assert torch.allclose(out[j, p:], eager[j, p:], atol=1e-5)
        eager_alone = (torch.softmax(q[j, :, p:] @ kk[j, :, p:].transpose(1, 2) * scaling + _mask([n], n)[0], -1)
                       @ vv[j, :, p:]).transpose(0, 1)
        eager_differs |= not torch.equal(eager_alone, eager[j, p:])
    assert eager_differs  # torch's eager attention: a padded row's reductions over its keys change with the padding
    decode, _ = invariant.attention(_Attn, q[:, :, -1:], k, v, _mask(lens, width)[:, :, -1:], scaling)
    assert torch.equal(decode[0, 0], out[0, -1])  # one query row: its step of decode
    monkeypatch.setattr(invariant, "CHUNK_BYTES", 1)  # one row and query position at a time
    assert torch.equal(invariant.attention(_Attn, q, k, v, _mask(lens, width), scaling)[0], out)


def test_attention_refuses_dropout() -> None:
    with pytest.raises(ValueError, match="dropout"):
        invariant.attention(_Attn, torch.randn(1, 4, 2, 8), torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8), None,
                            1.0, dropout=0.1)


def test_the_kernels_with_continuous_batching_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "/nowhere", "--invariant-kernels", "--continuous-batching"]) == 2
    out = capsys.readouterr().out.splitlines()  # the engine logs to stdout
    assert len(out) == 1 and out[0].endswith("drop --continuous-batching or --invariant-kernels"), out
