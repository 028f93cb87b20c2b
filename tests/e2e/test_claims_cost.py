"""A cost-ratio claim from the user's side: study load_planted_cost (every engine step 20 ms slower in one arm)
on the reference engine as local processes, run by `orchestrator claims --study` from another working directory:
the true claim ("inter-token latency at least 3x") replicated, the false one ("latency at most 1.5x") contradicted
with the interval that excludes it (exit 3); then the same claims on the run dir it made, nothing run again."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_claims import claims, verdicts

PROCESS = ["runtime=process", "arm@arms.baseline=reference_process", "arm@arms.slow=reference_process"]
FILE = """study: load_planted_cost
claims:
  - {name: a step 20 ms slower triples the gaps, kind: cost_ratio, arm: slow, baseline: baseline, phase: load,
     metric: inter_token_latency_s, at_least: 3}
  - {name: it costs at most half again in latency, kind: cost_ratio, arm: slow, baseline: baseline, phase: load,
     metric: latency_s, at_most: 1.5}
"""


def test_a_planted_cost_replicates_the_true_ratio_and_contradicts_the_false(tmp_path: Path) -> None:
    (tmp_path / "cost.yaml").write_text(FILE)
    result = claims(tmp_path, "cost.yaml", *PROCESS)
    assert result.returncode == 3, result.stderr[-3000:]
    found = verdicts(tmp_path / "claims" / "cost" / "claims.json")
    true, false = found["a step 20 ms slower triples the gaps"], found["it costs at most half again in latency"]
    assert true["verdict"] == "replicated" and true["lower"] >= 3, true
    assert false["verdict"] == "contradicted" and false["lower"] > 1.5, false
    assert (true["k"], true["n"]) == (6, 6)  # the preset's windows, a side
    assert "B/A" in result.stdout and "an interval that excludes the claim (latency_s: B/A <= 1.5)" in result.stdout
    again = claims(tmp_path, "cost.yaml", "--run", str(tmp_path / "claims" / "cost" / "run-1"), "--out", "again")
    assert again.returncode == 3, again.stderr[-3000:]
    assert {k: (v["verdict"], v["lower"]) for k, v in verdicts(tmp_path / "again" / "claims.json").items()} == \
        {k: (v["verdict"], v["lower"]) for k, v in found.items()}
