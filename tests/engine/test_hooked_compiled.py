"""The hooked engine's --cuda-graphs and --compile (hookedengine/compiled.py): one torch.compile setting per mode,
refused in one line where they cannot run, and the graphs' pool copied out of each step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hookedengine import compiled
from hookedengine.cli import build_parser, config_from_args

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_each_mode_is_one_setting_of_torch_compile_and_both_off_by_default() -> None:
    assert compiled.options(False, False) == {}
    assert compiled.options(True, False) == {"backend": "cudagraphs"}  # graphs, no Inductor
    assert compiled.options(False, True) == {"backend": "inductor"}  # Inductor, no graphs
    assert compiled.options(True, True) == {"mode": "reduce-overhead"}  # both
    cfg = config_from_args(build_parser().parse_args(["--model", "m"]))
    assert not cfg.cuda_graphs and not cfg.compile
    assert not cfg.static_cache
    cfg = config_from_args(build_parser().parse_args(["--model", "m", "--cuda-graphs", "--compile", "--static-cache"]))
    assert cfg.cuda_graphs and cfg.compile and cfg.static_cache


@pytest.mark.parametrize(("graphs", "comp", "device", "digests", "continuous", "static", "said"), [
    (True, False, CPU, False, False, True, "--cuda-graphs: CUDA graphs capture CUDA kernels, and this engine runs "
                                           "on cpu"),
    (False, True, CPU, True, False, False, "--compile: digests hook every module's call, which a compiled forward "
                                           "skips: add --no-digests"),
    (True, False, CUDA, False, True, True, "--continuous-batching runs Transformers' own: drop one"),
    (True, False, CUDA, False, False, False, "a growing KV cache changes them at every step: add --static-cache"),
    (False, True, CPU, False, False, False, None),  # compile runs on a CPU, over either cache
    (True, True, CUDA, False, False, True, None),
    (False, False, CPU, True, True, False, None),  # neither: nothing to refuse
])
def test_the_modes_are_refused_in_one_line_where_they_cannot_run(graphs: bool, comp: bool, device: torch.device,
                                                                 digests: bool, continuous: bool, static: bool,
                                                                 said: str | None) -> None:
    got = compiled.refusal(graphs, comp, device, digests, continuous, static)
    assert (got is None) if said is None else (got is not None and said in got and "\n" not in got)


def test_what_a_step_keeps_is_copied_out_of_the_pool() -> None:
    cache = SimpleNamespace(layers=[SimpleNamespace(keys=torch.ones(2), values=torch.zeros(2))])
    logits = torch.arange(3.0)
    before = cache.layers[0].keys
    kept = compiled.keep(logits, cache, static=False)
    assert torch.equal(kept, logits) and kept.data_ptr() != logits.data_ptr()
    assert torch.equal(cache.layers[0].keys, before) and cache.layers[0].keys.data_ptr() != before.data_ptr()
    held = cache.layers[0].keys
    kept = compiled.keep(logits, cache, static=True)  # a static cache's tensors stay where the graph writes them
    assert kept.data_ptr() != logits.data_ptr() and cache.layers[0].keys is held


def test_graphs_torch_skipped_are_counted() -> None:
    from torch._dynamo.utils import counters

    before = compiled.graph_skips()
    counters["inductor"]["cudagraph_skips"] += 2
    try:
        assert compiled.graph_skips() == before + 2
    finally:
        counters["inductor"]["cudagraph_skips"] -= 2
