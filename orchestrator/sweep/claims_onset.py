"""An onset claim (docs/claims.md): "diverges from N on", checked against an onset search's dir (onset.json,
sweep/onset_state.py; docs/onset.md): the bracket the search settled, onset after a, at or before b, at the
search's own confidence. Replicated when N lies in it, contradicted when outside it (a bracket reaching past the
range, "no onset in range", rule out what lies beyond their finite ends), else inconclusive: the search not settled
(undecided, not monotone, interrupted) or N where it still allows an onset without placing it."""

from __future__ import annotations

import math
from pathlib import Path

from orchestrator.analysis.claims import CONTRADICTED, INCONCLUSIVE, REPLICATED, ClaimResult
from orchestrator.config.catalog import line
from orchestrator.config.claims import ClaimConfig
from orchestrator.errors import ConfigError
from orchestrator.sweep import onset_state
from orchestrator.sweep.onset_state import Configuration, OnsetState

FURTHER = "run the search further: a larger max_jobs or a narrower width, with the same hydra.sweep.dir (docs/onset.md)"


def search_of(claim: ClaimConfig, where: str) -> tuple[OnsetState, Configuration]:
    """The claim's search and its configuration (`per`, where the search has several); one line where not."""
    folder = Path(claim.search or "")
    state = onset_state.read(folder)
    if state is None:
        raise ConfigError(f"{where}.search={str(folder)!r}: no {onset_state.FILE} there; name the hydra.sweep.dir "
                          "of an `orchestrator onset` search (docs/onset.md)")
    names = {" ".join(c.per): c for c in state.configurations}
    if claim.per is None and len(names) == 1:
        chosen = next(iter(names.values()))
    elif claim.per in names:
        chosen = names[claim.per]
    else:
        raise ConfigError(line("unknown-name", f"{where}.per", claim.per, sorted(names),
                               "the configuration of the search the claim is about"))
    target = (state.settings.get("target") or {}).get("arm")
    if target not in (None, claim.arm):
        raise ConfigError(line("unknown-name", f"{where}.arm", claim.arm, [target], f"the arm {folder} searched"))
    return state, chosen


def _bracket(result: dict[str, object], grid: list[float]) -> tuple[float, float]:
    """Where the onset may lie, (after, at or before]: the search's interval; "no onset in range" with no
    divergence, past the range's top; diverging throughout, at or below its bottom."""
    if result.get("outcome") == "no onset in range":
        return (grid[-1], math.inf) if result.get("below") else (-math.inf, grid[0])
    interval = result.get("interval")
    if not isinstance(interval, list | tuple):
        return -math.inf, math.inf
    low, high = interval
    return (-math.inf if low is None else float(low)), (math.inf if high is None else float(high))


def answer(claim: ClaimConfig, where: str) -> ClaimResult:
    state, chosen = search_of(claim, where)
    result = chosen.result or {}
    onset = float(claim.onset or 0)
    low, high = _bracket(result, state.grid)
    settled = result.get("outcome") == "onset" and not state.interrupted
    if not low < onset <= high:
        verdict = CONTRADICTED
    else:
        verdict = REPLICATED if settled and math.isfinite(low) and math.isfinite(high) else INCONCLUSIVE
    jobs = [j for j in chosen.jobs if j.n]
    notes = [f"the search: {result.get('line') or 'no result yet'}"
             + (f" (stopped: {result['stop']})" if result.get("stop") else ""),
             f"the bracket at the search's own confidence ({state.settings.get('confidence')})",
             *(["the search was interrupted: its answer is provisional"] if state.interrupted else []),
             *([FURTHER] if verdict == INCONCLUSIVE else [])]
    return ClaimResult(claim.name, "onset", f"diverges from {onset:g} on", claim.source, len(jobs),
                       sum(j.requests for j in chosen.jobs), low if math.isfinite(low) else math.nan,
                       high if math.isfinite(high) else math.nan, verdict, math.nan, math.nan, math.nan, None,
                       [f"{claim.search}{' (' + claim.per + ')' if claim.per else ''}"], notes, scale="onset",
                       estimate=onset)
