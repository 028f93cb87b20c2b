"""Turn a report into an exit status: CI can fail a build on divergence, which a report alone cannot."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ConfigError


def failures(result: dict[str, Any], gate: dict[str, Any]) -> list[str]:
    problems = []
    limit = gate.get("max_divergence_rate")
    if limit is not None:
        for cell in result["cells"]:
            if cell["divergent"] is None:
                problems.append(f"{cell['arm']}/{cell['prompt_id']}/{cell['phase']}: divergence unknown "
                                f"({cell['signature_note']})")
            elif cell["n"] and cell["divergent"] / cell["n"] > limit:
                problems.append(f"{cell['arm']}/{cell['prompt_id']}/{cell['phase']}: {cell['divergent']} divergent "
                                f"in {cell['n']} exceeds the stated rate {limit:g}")
    for key, expected in (("pairs", gate.get("expect_pairs") or {}), ("schedules", gate.get("expect_schedules") or {})):
        arm_field = "arm_b" if key == "pairs" else "arm"
        for arm, verdict in expected.items():
            rows = [r for r in result[key] if r[arm_field] == arm]
            if not rows:
                problems.append(f"{key}: no comparison for arm '{arm}' in this run")
            for row in rows:
                if row["verdict"] != verdict:
                    where = row.get("phase") or f"{row.get('phase_a')} vs {row.get('phase_b')}"
                    problems.append(f"{key}: {arm}/{row['prompt_id']}/{where} is {row['verdict']}, expected {verdict}")
    return problems


def gate_from_flags(run_gate: dict[str, Any] | None, max_divergence_rate: float | None,
                    expect_pairs: list[str], expect_schedules: list[str]) -> dict[str, Any]:
    """`compare`'s gate: the run's own (with --gate), then the flags (ARM=identical|differ) on top."""
    gate = dict(run_gate or {})
    if max_divergence_rate is not None:
        gate["max_divergence_rate"] = max_divergence_rate
    for items, key in ((expect_pairs, "expect_pairs"), (expect_schedules, "expect_schedules")):
        gate[key] = {**gate.get(key, {}), **dict(_arm_verdict(item) for item in items)}
    return gate


def _arm_verdict(item: str) -> tuple[str, str]:
    arm, _, verdict = item.partition("=")
    if verdict not in ("identical", "differ"):
        raise ConfigError(f"'{item}': expected ARM=identical or ARM=differ")
    return arm, verdict
