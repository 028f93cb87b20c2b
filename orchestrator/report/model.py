"""What a report shows: one study's results, typed, as the stages returned them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.analysis.attribution import Attribution
from orchestrator.analysis.cost_results import CostReport
from orchestrator.analysis.decode_prefill import DecodePrefill
from orchestrator.analysis.failures import ArmFailure
from orchestrator.analysis.prefix_served import PrefixServed
from orchestrator.analysis.results import ArmSummary, Comparison, WaveTime
from orchestrator.guard.results import GuardResult
from orchestrator.guard.side_effects import SideEffects
from orchestrator.report.environment import Environment
from orchestrator.report.headline import GateVerdict


@dataclass
class StudyReport:
    study: str
    run_id: str
    baseline: str | None
    arms: list[ArmSummary]
    comparison: Comparison
    guard: GuardResult | None = None
    failures: list[ArmFailure] = field(default_factory=list)  # arms that failed: where and why
    probes: list[dict[str, Any]] = field(default_factory=list)  # rows of the `probes` table
    attribution: list[Attribution] = field(default_factory=list)  # batch-variant ops, per diverging arm
    sweep: dict[str, Any] | None = None  # sweep/callback.py's summary
    headline: list[str] = field(default_factory=list)  # one sentence per question (report/headline.py)
    summary: str = ""  # one line: each arm's repeatability and each pair's verdicts (`ls`, `show`)
    gate: GateVerdict = field(default_factory=lambda: GateVerdict("not set"))
    environment: Environment = field(default_factory=Environment)
    timings_s: dict[str, float] = field(default_factory=dict)  # run.json: where the run's time went
    waves: list[WaveTime] = field(default_factory=list)  # study.parallel_arms: each wave's wall time
    incomplete: list[str] = field(default_factory=list)  # arms `run --resume` would finish (also in the headline)
    # Per arm, why its co-residency may go unseen, from its engine profile (report.md's "not observable")
    unobserved: dict[str, str] = field(default_factory=dict)
    cost: CostReport | None = None  # analysis/cost.py: starts, cost per load point, ratios, rates compared
    decode_prefill: DecodePrefill | None = None  # protocol.rescore: each cell's decode against its prefill
    prefix_cache: list[PrefixServed] = field(default_factory=list)  # analysis/prefix_served.py; [] where none said
    side_effects: list[SideEffects] = field(default_factory=list)  # per declared A/B: what else it changed

    def to_json(self) -> dict[str, Any]:
        """report.json: the comparison's lists at the top level, the rest only where present."""
        out: dict[str, Any] = {"study": self.study, "run_id": self.run_id, "baseline": self.baseline,
                               "headline": self.headline, "summary": self.summary, "gate": asdict(self.gate),
                               "environment": asdict(self.environment),
                               "arms": [asdict(a) for a in self.arms], **self.comparison.to_json()}
        if self.waves:
            out["waves"] = [asdict(w) for w in self.waves]
        if self.failures:
            out["failures"] = [asdict(f) for f in self.failures]
        if self.incomplete:  # `ls` and `show` say it in their verdict line
            out["incomplete"] = self.incomplete
        if self.guard is not None:
            out["guard"] = self.guard.to_json()
        if self.probes:
            out["probes"] = self.probes
        if self.attribution:
            out["attribution"] = [asdict(a) for a in self.attribution]
        if self.sweep:
            out["sweep"] = self.sweep
        if self.cost is not None:
            out["cost"] = asdict(self.cost)
        if self.decode_prefill is not None:
            out["decode_prefill"] = self.decode_prefill.to_json()
        if self.prefix_cache:
            out["prefix_cache"] = [{**asdict(p), "off_held": p.off_held} for p in self.prefix_cache]
        if self.side_effects:
            out["side_effects"] = [audit.to_json() for audit in self.side_effects]
        return out
