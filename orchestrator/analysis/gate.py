"""Turn a report into an exit status: CI can fail a build on divergence, which a report alone cannot."""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.results import Comparison, PairCheck, ScheduleCheck
from orchestrator.errors import ConfigError

# What a gate may expect of a pair or schedule -> the verdicts that meet it. `agree` is what an A/A or a change
# that should not matter expects: a noisy arm's two samples read "same distribution" or "no difference shown",
# never "identical" (config/validate.py lists the same names).
EXPECTED_VERDICTS = {"identical": ("identical",), "differ": ("differ",),
                     "agree": ("identical", "same distribution", "no difference shown")}


def failures(comparison: Comparison, gate: dict[str, Any]) -> list[str]:
    """Every way the results miss what the gate states; [] when it passes."""
    problems = []
    limit = gate.get("max_divergence_rate")
    if limit is not None:
        for cell in comparison.cells:
            if cell.divergent is None:
                problems.append(f"{cell.label}: divergence unknown ({cell.signature_note})")
            elif cell.n and cell.divergent / cell.n > limit:
                problems.append(f"{cell.label}: {cell.divergent} divergent in {cell.n} exceeds the stated rate "
                                f"{limit:g}")
    for arm, verdict in (gate.get("expect_pairs") or {}).items():
        problems += _expected("pairs", arm, verdict, [(p, p.phase) for p in comparison.pairs if p.arm_b == arm])
    for arm, verdict in (gate.get("expect_schedules") or {}).items():
        problems += _expected("schedules", arm, verdict, [(s, f"{s.phase_a} vs {s.phase_b}")
                                                          for s in comparison.schedules if s.arm == arm])
    return problems


def _expected(key: str, arm: str, verdict: str, rows: list[tuple[PairCheck | ScheduleCheck, str]]) -> list[str]:
    if not rows:
        return [f"{key}: no comparison for arm '{arm}' in this run"]
    return [f"{key}: {arm}/{row.prompt_id}/{where} is {row.verdict}, expected {verdict}"
            for row, where in rows if row.verdict not in EXPECTED_VERDICTS[verdict]]


def gate_from_flags(run_gate: dict[str, Any] | None, max_divergence_rate: float | None,
                    expect_pairs: list[str], expect_schedules: list[str]) -> dict[str, Any]:
    """`compare`'s gate: the run's own (with --gate), then the flags (ARM=identical|agree|differ) on top."""
    gate = dict(run_gate or {})
    if max_divergence_rate is not None:
        gate["max_divergence_rate"] = max_divergence_rate
    for items, key in ((expect_pairs, "expect_pairs"), (expect_schedules, "expect_schedules")):
        gate[key] = {**gate.get(key, {}), **dict(_arm_verdict(item) for item in items)}
    return gate


def _arm_verdict(item: str) -> tuple[str, str]:
    arm, _, verdict = item.partition("=")
    if verdict not in EXPECTED_VERDICTS:
        raise ConfigError(f"'{item}': expected ARM=identical, ARM=agree or ARM=differ")
    return arm, verdict
