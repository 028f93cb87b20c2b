"""Ground truth: each reference-engine mechanism switched on is detected by the orchestrator's own
comparison where it acts, and only there; with every switch off nothing diverges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]


def run_study(tmp_path: Path, *overrides: str) -> dict[str, Any]:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    report["facts"] = {a["arm"]: json.loads(a["fingerprint_json"])["log_facts"]
                       for a in pq.read_table(tmp_path / "data" / "arms").to_pylist()}
    return report


def distinct(report: dict[str, Any], arm: str, prompt: str, phase: str = "sequential") -> int:
    [cell] = [c for c in report["cells"] if (c["arm"], c["prompt_id"], c["phase"]) == (arm, prompt, phase)]
    assert cell["n"] > 0 and cell["errors"] == 0
    return int(cell["distinct_signatures"])


def cold_matches(report: dict[str, Any], arm: str) -> bool:
    [check] = [c for c in report["cold"] if c["arm"] == arm]
    return bool(check["matches_warm"])


def test_every_switch_off_30_repeats_one_signature(tmp_path: Path) -> None:
    report = run_study(tmp_path, "~arms.wide_batch", "protocol.phases.sequential.repeats=31",
                       "protocol.phases.concurrent.repeats=30", "protocol.phases.concurrent.batches=1")
    for cell in report["cells"]:
        assert cell["n"] >= 30 and cell["distinct_signatures"] == 1, cell  # one cold request is set apart
        assert cell["upper_bound_95"] <= 0.0951
    assert all(s["verdict"] == "identical" for s in report["schedules"])
    assert all(c["matches_warm"] for c in report["cold"])


def test_fused_finalize_detected_only_when_on(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=fused_finalize")
    for prompt in ("capital", "count"):
        assert distinct(report, "fused", prompt) > 1
        assert distinct(report, "unfused", prompt) == 1
    assert report["facts"]["fused"]["fused_finalize"] == "on"
    assert report["facts"]["unfused"]["fused_finalize"] == "off"


def test_topk_ties_vary_only_above_the_budget(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=indexer_budget")
    assert distinct(report, "random_topk", "above") > 1
    assert distinct(report, "random_topk", "below") == 1
    assert distinct(report, "random_topk", "near") == 1  # generation past the budget stays repeatable
    for prompt in ("below", "near", "above"):
        assert distinct(report, "stable", prompt) == 1


def test_batch_variance_shows_across_schedules_and_inside_an_over_capacity_batch(tmp_path: Path) -> None:
    """Each fixed batch shape is repeatable; a batch of 20 on max-num-seqs 16 runs as engine batches of 16 and 4,
    so with invariance off its cell holds two signatures: the explorer shows the split, the top-k there and the
    co-residents each branch ran with, and the batch is reported queued, not kept out."""
    report = run_study(tmp_path, "study=batch_invariance")
    verdicts = {(s["arm"], s["prompt_id"]): s["verdict"] for s in report["schedules"]
                if (s["phase_a"], s["phase_b"]) == ("sequential", "concurrent")}
    assert verdicts == {("invariant", "capital"): "identical", ("invariant", "count"): "identical",
                        ("variant", "capital"): "differ", ("variant", "count"): "differ"}
    assert distinct(report, "variant", "capital", "sequential") == 1
    assert distinct(report, "variant", "capital", "concurrent") == 1
    assert report["facts"]["variant"]["batch_invariant"] == "off"
    for prompt in ("capital", "count"):
        assert distinct(report, "invariant", prompt, "over_capacity") == 1
        assert distinct(report, "variant", prompt, "over_capacity") == 2
    queued = [b for b in report["batches"] if b["phase"] == "over_capacity"]
    assert queued and all((b["size"], b["capacity"], b["together"], b["co_resident"]) == (20, 16, 16, True)
                          for b in queued)
    explored = {e["label"]: e for e in report["explorer"]}
    assert not [label for label in explored if label.startswith("invariant/")]
    for prompt in ("capital", "count"):
        modal, branch = explored[f"variant/{prompt}/over_capacity"]["completions"]
        assert (modal["requests"], branch["requests"]) == (16, 4)
        assert modal["batches"] == branch["batches"] == [[0, 20]]
        assert (modal["co_residents"], branch["co_residents"]) == ([15], [3])  # engine batches of 16 and 4
        assert branch["split"] is not None and branch["split_kind"] in ("token", "logprob")
        assert branch["top_at_split"] and branch["first_top_at_split"]
        assert branch["top_at_split"] != branch["first_top_at_split"]


def test_autotune_cold_first_differs_with_a_fresh_cache_only(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=autotune_cold")
    assert not cold_matches(report, "fresh")  # tuned on the first request
    assert cold_matches(report, "reuse")  # loaded the entry the first arm wrote
    assert report["facts"]["reuse"]["autotune_key"] == report["facts"]["fresh"]["autotune_key"]
    assert distinct(report, "fresh", "count") == 1 and distinct(report, "reuse", "count") == 1
    assert list((tmp_path / "scratch" / "autotune" / "autotune").glob("*.json"))


def test_shared_legacy_cache_makes_unfused_arm_vary(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=autotune_shared_legacy")
    assert distinct(report, "unfused", "count") > 1  # silently reused the fused entry
    assert report["facts"]["unfused"]["autotune_entry_finalize"] == "fused"
    assert report["facts"]["unfused"]["fused_finalize"] == "off"


def test_backend_pin_changes_cache_key_not_backend(tmp_path: Path) -> None:
    report = run_study(tmp_path, "study=backend_pin")
    auto, pinned = report["facts"]["auto"], report["facts"]["pinned"]
    assert auto["moe_backend"] == pinned["moe_backend"] == "FLASHINFER_CUTLASS"
    assert auto["autotune_key"] != pinned["autotune_key"]
    assert distinct(report, "auto", "count") == 1 and distinct(report, "pinned", "count") == 1


def test_position_parity_locates_the_budget_onset(tmp_path: Path) -> None:
    # A small budget keeps it quick: 256 tokens; prompts of 200, 250 and 600 tokens.
    report = run_study(tmp_path, "study=position_parity", "arms.random_topk.engine_args.indexer-budget=256",
                       "+arms.stable.engine_args.indexer-budget=256",  # the same budget: no longer a variable
                       "study.variables.random_topk=[engine_args.topk-tiebreak]",
                       "prompts.prompts.below.repeat_to_chars=200",
                       "prompts.prompts.near.repeat_to_chars=250", "prompts.prompts.above.repeat_to_chars=600",
                       "protocol.request.max_tokens=16", "protocol.phases.sequential.repeats=5",
                       "protocol.phases.concurrent.repeats=5")
    above = [c for c in report["cells"] if c["arm"] == "random_topk" and c["prompt_id"] == "above"]
    assert {c["phase"] for c in above} == {"sequential", "concurrent"}  # the loop below checks something
    for cell in above:
        # prompt positions past the budget are the first whose forced-token logprob varies
        assert cell["first_prompt_position_with_spread"] == 257
        assert cell["max_prompt_spread"] > 0 and cell["min_top1_agreement"] < 1
    for cell in report["cells"]:
        if cell["arm"] == "stable" or cell["prompt_id"] != "above":
            assert cell["max_prompt_spread"] == 0 and cell["min_top1_agreement"] == 1, cell
        if cell["batch_size"] is not None:
            assert cell["co_resident"] is True and cell["min_running_observed"] == 5
    html = (tmp_path / "report.html").read_text()
    assert html.count("<svg") >= 2 and "prompt positions" in html.lower()
    # The prompt past the budget varies, so a branch's logprobs differ from the first generated token on: that
    # is its split; a later token flip is a second fact, inside the window too.
    explored = [e for e in report["explorer"] if e["label"].startswith("random_topk/above/")]
    assert explored and all(e["label"].startswith("random_topk/above/") for e in report["explorer"])
    for e in explored:
        branches = e["completions"][1:]
        assert min(b["split"] for b in branches) == 0
        for b in branches:
            assert b["split"] in e["window_positions"]
            if b["flip"] is not None:
                assert b["split_kind"] == "logprob" and b["split"] < b["flip"]["position"] in e["window_positions"]


def test_prefix_cache_first_request_differs_from_its_repeats_and_a_flush_makes_every_repeat_identical(
        tmp_path: Path) -> None:
    """The seed's uncontrolled prefix-cache exclusion: with the cache on, a prompt's first request is prefilled
    cold and its repeats from the cache (another path), so the cold request (capital) matches no warm one and the
    count cell, whose first measured request is its prompt's first, holds two signatures; the answers' usage says
    which were served from the cache. Off, or flushed before every request, every repeat is identical."""
    report = run_study(tmp_path / "on", "study=prefix_cache")
    assert distinct(report, "cached", "count") == 2 and not cold_matches(report, "cached")
    assert distinct(report, "uncached", "capital") == distinct(report, "uncached", "count") == 1
    assert cold_matches(report, "uncached")
    served = {row["arm"]: row for row in report["prefix_cache"]}
    assert served["cached"]["served"] == 15 and served["cached"]["off_held"] is False  # all but count's first
    assert served["uncached"]["served"] == 0 and served["uncached"]["off_held"] is True
    assert (report["facts"]["cached"]["prefix_cache"], report["facts"]["uncached"]["prefix_cache"]) == ("on", "off")

    flushed = run_study(tmp_path / "flushed", "study=prefix_cache", "protocol.flush_prefix_cache=between_requests")
    for arm in ("cached", "uncached"):
        assert distinct(flushed, arm, "capital") == distinct(flushed, arm, "count") == 1
        assert cold_matches(flushed, arm)
    assert [row["served"] for row in flushed["prefix_cache"]] == [0, 0]
