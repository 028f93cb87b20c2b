"""`orchestrator claims` on a run dir `orchestrator import` made (docs/import.md), from the user's folder: detLLM's
repro pack of a fused-finalize run at tier 2 (tests/data/import/detllm/fused_on_tier2: 5 runs of 2 prompts, each
run's scores apart, detLLM's verdict FAIL SCORE_VARIANCE). The claim that its runs never diverge is contradicted,
as detLLM says; a flip count is read from the imported tokens; the page says what the source lacked."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, orchestrator
from tests.e2e.test_claims import claims

SOURCE = ROOT / "tests" / "data" / "import" / "detllm" / "fused_on_tier2"
FILE = """claims:
  - {name: never diverges, kind: divergence_rate, arm: detllm, at_most: 0}
  - {name: no top-1 flip, kind: flips_at, arm: detllm, flips: 0, of: 5}
  - {name: no crash, kind: no_crash, arm: detllm, margin: 0.5}
"""


def test_claims_on_an_imported_detllm_pack(tmp_path: Path) -> None:
    imported = orchestrator("import", str(SOURCE), "--out", str(tmp_path / "imported"))
    assert imported.returncode == 0, imported.stderr[-2000:]
    (tmp_path / "c.yaml").write_text(FILE)
    result = claims(tmp_path, "c.yaml", "--run", "imported")
    assert result.returncode == 3, result.stderr[-2000:]  # a claim contradicted
    found = {c["name"]: c for c in json.loads((tmp_path / "claims" / "c" / "claims.json").read_text())["claims"]}
    assert (found["never diverges"]["verdict"], found["never diverges"]["k"], found["never diverges"]["n"]) == (
        "contradicted", 8, 10)  # 5 signatures in 5 runs, a prompt: 4 off the modal one each
    assert (found["no top-1 flip"]["verdict"], found["no top-1 flip"]["n"]) == ("inconclusive", 10)
    assert found["no top-1 flip"]["k"] == 0 and found["no top-1 flip"]["n_needed"] == 29  # greedy: same tokens
    assert found["no crash"]["verdict"] == "replicated"  # 0 of 10: at most 26 %, short of the 50 % alternative
    said = "imported: Imported from detLLM 0.1.1: no top-k logprobs (tier 2: the chosen token's only)"
    assert said in result.stdout and said in (tmp_path / "claims" / "c" / "claims.md").read_text()
