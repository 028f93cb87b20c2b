"""A top-1 flip count claim (docs/claims.md): "F flips in N requests" (the seed's "concurrent batches retained 0,
416 and 665 flips"), optionally over generated positions [from, to). A cell's report lists its first few flip
positions only (compare.FLIP_POSITIONS), so the count is read from the record: each request's generated tokens
against its cell's reference request (the first of the modal signature, as the comparison takes it), a flip where
both have a token and they differ; the cell's `top1_flips` is the sum over its requests.

"0 flips" is a rate claim: no request flips in the positions (analysis/claims.py, exact). F > 0 is a claim about the
mean count a request, F / N, within +-margin of it: its interval Student's t on the requests' counts, replicated
when it lies inside that band, contradicted when wholly outside; the requests that would settle it an estimate from
the pilot's spread (analysis/claims_cost.py's band, on the counts rather than their logs)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from orchestrator.analysis import batches, claims, positions
from orchestrator.analysis.cells import iter_cells
from orchestrator.analysis.claims import BATCHED, ClaimResult, Selector
from orchestrator.analysis.claims_cost import RatioClaim
from orchestrator.analysis.compare import basis_of, capacities
from orchestrator.analysis.explorer import Signatures
from orchestrator.analysis.results import SIGNATURE_BASES, Cell
from orchestrator.analysis.stats import POOLED_ASSUMPTION, t_quantile
from orchestrator.record.recorded import Recorded, RecordedRun

ESTIMATE = "an estimate from the pilot's variance: its spread of counts and its mean taken as the truth's"


@dataclass(frozen=True)
class FlipCounts:
    """Each request's top-1 flips in the positions, over the claim's cells; the cells; any batch a run kept out."""

    counts: list[int]
    cells: list[str]
    concurrent: bool


def flip_counts(runs: list[RecordedRun], selector: Selector, span: tuple[int, int] | None) -> FlipCounts:
    """Per measured request of the selected cells (errors and batches the comparison keeps out left out)."""
    arm, phase, prompt = selector
    counts: list[int] = []
    cells: list[str] = []
    concurrent = False
    for run in runs:
        recorded = Recorded.of([run])
        capacity = capacities(recorded)
        for cut in iter_cells(recorded, texts=False):
            if cut.key[0] != arm or phase not in (None, cut.key[2]) or prompt not in (None, cut.key[1]):
                continue
            table = cut.rows
            ok = pc.is_null(table.column("error")).to_numpy(zero_copy_only=False)
            scratch = Cell(arm=arm, prompt_id=cut.key[1], phase=cut.key[2], n=0, errors=0, distinct_completions=0,
                           distinct_signatures=None, divergent=None, upper_bound_95=None, lower_bound_95=None)
            _, keep = batches.check(scratch, capacity.get(arm), table.select(batches.COLUMNS))
            warm = table.take(np.flatnonzero(ok & keep))
            if not warm.num_rows:
                continue
            signed = Signatures.of(SIGNATURE_BASES[basis_of(warm)], warm.column(SIGNATURE_BASES[basis_of(warm)]))
            reference = int(np.argmax(signed.codes == signed.modal))
            codes = positions.token_codes(warm.column("token_ids"), warm.column("tokens"))
            if not codes.size:
                continue
            ref = codes[reference]
            flipped = (codes != ref) & (codes >= 0) & (ref >= 0)
            if span is not None:
                flipped = flipped[:, span[0]:span[1]]
            counts += flipped.sum(axis=1).astype(int).tolist()
            cells.append(f"{arm}/{cut.key[1]}/{cut.key[2]}")
            concurrent = concurrent or cut.concurrent
    return FlipCounts(counts, cells, concurrent)


def _notes(found: FlipCounts) -> list[str]:
    return ["each request's flips read from the record (its tokens against its cell's reference request)",
            *([POOLED_ASSUMPTION] if len(found.cells) > 1 else []), *([BATCHED] if found.concurrent else [])]


def answer_none(name: str, claimed: str, source: str, margin: float, confidence: float, found: FlipCounts,
                target: float) -> ClaimResult:
    """"0 flips": the rate of requests with a flip is at most 0 (exact)."""
    evidence = claims.Evidence(sum(c > 0 for c in found.counts), len(found.counts), found.cells, _notes(found))
    return claims.answer(name, "flips_at", claimed, source, claims.RateClaim(0.0, False, margin, confidence),
                         evidence, target)


def answer_count(name: str, claimed: str, source: str, band: RatioClaim, found: FlipCounts, target: float
                 ) -> ClaimResult:
    """F > 0 flips in N requests: the mean a request against F / N +- margin (t interval on the counts)."""
    n, notes = len(found.counts), _notes(found)
    if n < 2:
        return ClaimResult(name, "flips_at", claimed, source, sum(found.counts), n, math.nan, math.nan,
                           claims.INCONCLUSIVE, 0.0, 0.0, math.nan, None, found.cells,
                           [*notes, "no interval: fewer than 2 requests"], scale="count")
    values = np.array(found.counts, dtype=float)
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    if sd == 0:  # every request alike: all none gives the zero-count bound on the mean (Poisson), else a point
        lower, upper = (0.0, -math.log(1 - band.confidence) / n) if mean == 0 else (mean, mean)
    else:
        half = t_quantile(0.5 + band.confidence / 2, n - 1) * sd / math.sqrt(n)
        lower, upper = max(0.0, mean - half), mean + half
    if sd == 0 or mean == 0:
        needed, chance = None, 1.0 if band.verdict(lower, upper) != claims.INCONCLUSIVE else 0.0
    else:
        needed, chance = band.windows_needed(mean, sd, target), band.power(mean, sd, n)
    return ClaimResult(name, "flips_at", claimed, source, int(values.sum()), n, lower, upper,
                       band.verdict(lower, upper), chance, chance, math.nan, needed, found.cells,
                       [*notes, f"requests that settle it: {ESTIMATE}"], scale="count", estimate=mean)
