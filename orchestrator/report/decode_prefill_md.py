"""report.md's "Decode against prefill" (protocol.rescore, analysis/decode_prefill.py): per cell, how often the decode
steps' argmax is the prefill's, where it is not, and the largest |Δ logprob| of a chosen token; the arms whose engine
cannot say, and why (docs/usage.md "Decode against prefill")."""

from __future__ import annotations

from orchestrator.analysis.decode_prefill import DecodePrefill, DecodePrefillCell
from orchestrator.errors import counted
from orchestrator.report.table import markdown_table, num, pct

SHOWN_POSITIONS = 6  # disagreeing positions listed per cell, then "..."


def _positions(cell: DecodePrefillCell) -> str:
    shown = ", ".join(map(str, cell.disagree_positions[:SHOWN_POSITIONS]))
    return (shown + (", ..." if len(cell.disagree_positions) > SHOWN_POSITIONS else "")) or "none"


def _delta(cell: DecodePrefillCell) -> str:
    if cell.max_abs_delta is None:
        return "-"
    return f"{num(cell.max_abs_delta)} (position {cell.max_delta_position})" if cell.max_abs_delta else "0"


def section(found: DecodePrefill | None) -> list[str]:
    if found is None:
        return []
    out = ["## Decode against prefill (protocol.rescore)", "",
           "Each answer's own tokens re-scored as a prompt (prompt logprobs: one prefill) beside the logprobs its "
           "decode steps gave: argmax agreement = share of answer positions whose decode top-1 is the prefill's; "
           "|Δ logprob| = |decode - prefill| logprob of the chosen token. Disagreement localises a flip to the decode "
           "path; agreement with answers that still differ puts it in the prefill path (or the batch). Positions count "
           "from 0, the first generated token.", ""]
    if found.cells:
        out += markdown_table(
            ["arm", "prompt", "phase", "answers", "argmax agreement", "positions that disagree", "max abs Δ logprob"],
            [[c.arm, c.prompt_id, c.phase, str(c.answers) + (f" ({c.unscored} not re-scored)" if c.unscored else ""),
              f"{pct(c.argmax_share)} of {counted(c.positions, 'answer position')}", _positions(c), _delta(c)]
             for c in found.cells])
    out += [f"- {arm}: not observable: {why}" for arm, why in found.unobservable.items()]
    return [*out, ""] if found.unobservable else out
