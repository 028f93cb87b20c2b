"""Each arm's drift from a control arm (`study.control`: the same requests on a higher precision, e.g. fp32 beside
bf16; docs/usage.md "A control arm"): per prompt and phase, how many of the arm's answers are the control's, where
its modal answer's tokens part from the control's, and by how much the chosen tokens' logprobs differ before
they part. Two arms that differ from each other can then be told apart: the one nearer the control is not
"worse", only "different"; the seed: "No emulation control ... was completed"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from orchestrator.analysis.positions import first_difference
from orchestrator.analysis.results import ControlDrift

Key = tuple[str, str, str]  # (arm, prompt_id, phase)


class Answered(Protocol):
    """What a cell's reference keeps for the comparisons (analysis/compare.py `_Reference`)."""

    ok: bool
    tokens: np.ndarray | None  # the modal request's generated token codes (-1 padded)
    logprobs: np.ndarray | None  # its chosen tokens' logprobs (NaN where not recorded)
    texts: dict[str | None, int]  # completion signature -> requests


def drift(refs: Mapping[Key, Answered], control: str) -> list[ControlDrift]:
    """Every other arm's cells against the control's."""
    out = []
    for (arm, prompt_id, phase), ref in refs.items():
        if arm == control:
            continue
        mine = ControlDrift(arm, control, prompt_id, phase, sum(ref.texts.values()), 0, None, None, None)
        base = refs.get((control, prompt_id, phase))
        if base is None or not base.ok or not ref.ok:
            mine.note = f"no answer from {control}" if base is None or not base.ok else "no answer"
            out.append(mine)
            continue
        modal = max(base.texts, key=lambda text: base.texts[text])
        mine.as_control = ref.texts.get(modal, 0)
        if base.tokens is None or ref.tokens is None:
            mine.note = "no tokens recorded: the text alone compared"
            out.append(mine)
            continue
        mine.first_token_split = first_difference(base.tokens, ref.tokens)
        same = mine.first_token_split if mine.first_token_split is not None else min(len(base.tokens),
                                                                                     len(ref.tokens))
        if base.logprobs is None or ref.logprobs is None:
            mine.note = "no logprobs recorded"
        else:
            gaps = np.abs(ref.logprobs[:same] - base.logprobs[:same])
            gaps = gaps[~np.isnan(gaps)]
            if gaps.size:
                mine.max_logprob_drift, mine.mean_logprob_drift = float(gaps.max()), float(gaps.mean())
            else:
                mine.note = "no position before the split has both logprobs"
        out.append(mine)
    return out
