"""Who ran alongside a probe under load. From a server that traces requests (engine steps per request): the
other requests of the arm's load phase whose steps overlap the probe's; else from /metrics sampled while the
probe was in flight (`batch_running_max`, less the probe itself; a reading of 0 missed the probe, which ran: no
count); not observed where the arm's /metrics gave readings but none showed these probes; else not observable."""

from __future__ import annotations

import numpy as np

from orchestrator.analysis.batches import METRICS, TRACE
from orchestrator.analysis.batches import NOT_OBSERVED as MISSED
from orchestrator.analysis.cost_results import CoResidents

UNSEEN = "not observable"
__all__ = ["METRICS", "MISSED", "TRACE", "UNSEEN", "overlapping", "per_cell"]


def overlapping(first: np.ndarray, last: np.ndarray, probes: np.ndarray) -> np.ndarray:
    """For each row of `probes` (indices into first/last), how many other rows' step intervals [first, last]
    overlap its own: the rows that start by its last step, less those that ended before its first step, less
    itself. Sorted arrays and binary search: n log n, not n squared."""
    starts, ends = np.sort(first), np.sort(last)
    begun = np.searchsorted(starts, last[probes], side="right")
    ended = np.searchsorted(ends, first[probes], side="left")
    counts: np.ndarray = begun - ended - 1
    return counts


def per_cell(arm: str, phase: str, prompt_ids: list[str | None], roles: list[str | None],
             first_step: np.ndarray, last_step: np.ndarray, running_max: np.ndarray) -> list[CoResidents]:
    """One summary per prompt of the phase over its probes (role measured). `first_step`, `last_step` and
    `running_max` are floats with NaN where the record has null."""
    probe = np.array([r == "measured" for r in roles], dtype=bool)
    traced = ~np.isnan(first_step) & ~np.isnan(last_step)
    out = []
    for prompt in dict.fromkeys(p for p, is_probe in zip(prompt_ids, probe, strict=True) if is_probe):
        mine = np.flatnonzero(probe & np.array([p == prompt for p in prompt_ids], dtype=bool))
        if traced[mine].all():
            # only traced rows compete: a row without steps (an error) ran nowhere the trace saw
            index = np.flatnonzero(traced)
            at = np.searchsorted(index, mine)
            counts = overlapping(first_step[index], last_step[index], at).astype(np.float64)
            source = TRACE
        elif (running_max[mine] > 0).any():  # NaN compares False: no sample while the probe was in flight
            seen = running_max[mine]
            counts, source = seen[seen > 0] - 1, METRICS
        else:
            sampled = not np.isnan(running_max).all()  # the arm's /metrics gave readings in this phase
            out.append(CoResidents(arm, str(prompt), phase, len(mine), None, None, None, MISSED if sampled else UNSEEN,
                                   observed=0))
            continue
        out.append(CoResidents(arm, str(prompt), phase, len(mine), int(counts.min()), float(np.median(counts)),
                               int(counts.max()), source, observed=len(counts)))
    return out
