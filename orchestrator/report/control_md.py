"""The report's section on each arm's drift from the control arm (study.control, analysis/control.py)."""

from __future__ import annotations

from orchestrator.analysis.results import Comparison
from orchestrator.report.table import markdown_table, num


def sections(result: Comparison) -> list[str]:
    if not result.control_drift:
        return []
    control = result.control_drift[0].control
    out = [f"## Drift from the control `{control}`", "",
           f"Each cell against `{control}`'s cell of the same prompt and phase (the same requests on a higher "
           "precision): how many of its answers are the control's modal answer, where its modal answer's tokens "
           "part from the control's, and the largest and mean |logprob difference| of the chosen tokens before "
           "they part. An arm nearer the control is not worse for differing from another (docs/usage.md).", ""]
    out += markdown_table(["arm", "prompt", "phase", "answers as the control", "first token split",
                           "max |Δ logprob|", "mean |Δ logprob|", "note"], [
        [d.arm, d.prompt_id, d.phase, f"{d.as_control} of {d.n}",
         "never" if d.first_token_split is None and not d.note else
         "-" if d.first_token_split is None else str(d.first_token_split),
         num(d.max_logprob_drift, 3), num(d.mean_logprob_drift, 3), d.note or "-"]
        for d in result.control_drift])
    return out
