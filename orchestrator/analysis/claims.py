"""A claim about a rate, checked on k of n (docs/claims.md): the interval is the report's own
(stats.divergence_bound: one-sided when k = 0, Clopper-Pearson otherwise), the power is exact (the binomial tail as
the incomplete beta function, stats.beta_cdf), and the n is the fewest requests at which the check is decisive
with the stated power both ways.

A claim says the rate is at most (or at least) `claimed`; its alternative is `claimed` plus (or minus) the margin.
The check contradicts the claim when the interval lies wholly outside what it claims, and replicates it when the
interval lies wholly short of the alternative; else it is inconclusive. Its power is the chance it contradicts the
claim were the truth the alternative; its assurance the chance it replicates the claim were the truth the claimed
rate. The claims' cells come from report.json's cells and arms (or the same re-made from the record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.stats import POOLED_ASSUMPTION, beta_cdf, divergence_bound

REPLICATED, CONTRADICTED, INCONCLUSIVE = "replicated", "contradicted", "inconclusive"
BATCHED = ("requests released together are counted as if independent: where a batch diverges as one (its "
           "shape), the interval is narrower than the batches alone would give")
LIMIT_N = 1_000_000  # the n that settles a claim is searched up to this; beyond it: None


@dataclass(frozen=True)
class RateClaim:
    """The rate is at most `claimed` (at_least False) or at least it; false by `margin` at the alternative."""

    claimed: float
    at_least: bool
    margin: float
    confidence: float

    @property
    def alternative(self) -> float:
        return min(1.0, max(0.0, self.claimed - self.margin if self.at_least else self.claimed + self.margin))

    def bounds(self, k: int, n: int) -> tuple[float, float]:
        return divergence_bound(k, n, self.confidence)

    def contradicts(self, k: int, n: int) -> bool:
        lower, upper = self.bounds(k, n)
        return upper < self.claimed if self.at_least else lower > self.claimed

    def replicates(self, k: int, n: int) -> bool:
        lower, upper = self.bounds(k, n)
        return lower > self.alternative if self.at_least else upper < self.alternative

    def verdict(self, k: int, n: int) -> str:
        return CONTRADICTED if self.contradicts(k, n) else REPLICATED if self.replicates(k, n) else INCONCLUSIVE

    def power(self, n: int) -> float:
        """The chance that n requests contradict the claim, were the rate the alternative."""
        if self.at_least:  # contradicted for k up to the last k whose upper bound is below the claim
            return 1.0 - tail(first(n, lambda k: not self.contradicts(k, n)), n, self.alternative)
        return tail(first(n, lambda k: self.contradicts(k, n)), n, self.alternative)

    def assurance(self, n: int) -> float:
        """The chance that n requests replicate the claim, were the rate the claimed one."""
        if self.at_least:
            return tail(first(n, lambda k: self.replicates(k, n)), n, self.claimed)
        return 1.0 - tail(first(n, lambda k: not self.replicates(k, n)), n, self.claimed)

    def n_needed(self, target: float, limit: int = 0) -> int | None:
        """The fewest requests at which power and assurance both reach `target` (fewest)."""
        return fewest(lambda n: self.power(n) >= target and self.assurance(n) >= target, limit or LIMIT_N)


def fewest(enough: Callable[[int], bool], limit: int) -> int | None:
    """The fewest n where `enough`, by doubling, then halving the gap (power rises with n, in a sawtooth: this
    finds one n past which it holds, near the least); None: not within `limit`."""
    low, high = 0, 1
    while not enough(high):
        if high >= limit:
            return None
        low, high = high, min(limit, 2 * high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def first(n: int, holds: Callable[[int], bool]) -> int:
    """The first k in 0..n where `holds` (false, then true as k rises), n + 1 if none: by halving."""
    low, high = -1, n + 1
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle, high)
    return high


def tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the regularised incomplete beta I_p(k, n - k + 1)."""
    return 1.0 if k <= 0 else 0.0 if k > n else beta_cdf(p, k, n - k + 1)


@dataclass(frozen=True)
class Evidence:
    """What a claim is checked on: k of n pooled over its cells, and what was left out or assumed."""

    k: int
    n: int
    cells: list[str]
    notes: list[str]


Selector = tuple[str, str | None, str | None]  # arm, phase (None: every one), prompt (None: every one)


def cells_of(cells: list[dict[str, Any]], selector: Selector) -> list[dict[str, Any]]:
    arm, phase, prompt = selector
    return [c for c in cells if c["arm"] == arm and phase in (None, c["phase"]) and prompt in (None, c["prompt_id"])]


def _label(cell: dict[str, Any]) -> str:
    return f"{cell['arm']}/{cell['prompt_id']}/{cell['phase']}"


def divergence(cells: list[dict[str, Any]], selector: Selector) -> Evidence:
    """Requests whose signature differs from their cell's most common one; cells ended at their k-th divergence
    (protocol.stop_after_divergences: their n was not fixed) and cells without signatures left out."""
    chosen = cells_of(cells, selector)
    kept = [c for c in chosen if c.get("divergent") is not None and c.get("stopped_after") is None]
    notes = [f"left out: {_label(c)} ({'stopped at a divergence' if c.get('stopped_after') else 'no signatures'})"
             for c in chosen if c not in kept]
    batched = [c for c in kept if c.get("batch_size")]
    return Evidence(sum(c["divergent"] for c in kept), sum(c["n"] for c in kept), [_label(c) for c in kept],
                    [*notes, *([POOLED_ASSUMPTION] if len(kept) > 1 else []), *([BATCHED] if batched else [])])


def sharing(cells: list[dict[str, Any]], selector: Selector) -> Evidence:
    """For "N in N distinct": requests whose answer another request of their cell also gave. A cell records how
    many signatures it saw (s of n), not how often each: s = n gives 0, s < n at least n - s + 1 (one answer
    shared by n - s + 1 requests, the rest alone), the fewest, so a contradiction on it holds for the true count."""
    chosen = [c for c in cells_of(cells, selector) if c.get("distinct_signatures") is not None]
    k = sum(0 if c["distinct_signatures"] == c["n"] else c["n"] - c["distinct_signatures"] + 1 for c in chosen)
    return Evidence(k, sum(c["n"] for c in chosen), [_label(c) for c in chosen],
                    ["requests sharing an answer counted at their fewest (n - distinct + 1)",
                     *([POOLED_ASSUMPTION] if len(chosen) > 1 else [])])


def flipped(cells: list[dict[str, Any]], selector: Selector) -> Evidence:
    """Requests with a top-1 flip (a generated token other than the modal request's). A cell records the flips
    at its first positions, not per request: none gives 0, else the most flips at one listed position (each a
    request of its own), the fewest the flips allow, so a contradiction on it holds for the true count."""
    chosen = [c for c in cells_of(cells, selector) if c.get("top1_flips") is not None]
    k = sum(max([flips for _, flips in c.get("top1_flip_positions") or []] or [1]) if c["top1_flips"] else 0
            for c in chosen)
    return Evidence(k, sum(c["n"] for c in chosen), [_label(c) for c in chosen],
                    ["requests with a flip counted at their fewest (the most flips at one position)",
                     *([POOLED_ASSUMPTION] if len(chosen) > 1 else [])])


def crashes(cells: list[dict[str, Any]], arms: list[dict[str, Any]], selector: Selector) -> Evidence:
    """Requests that failed, and starts of the arm that failed (each counted as a failed request: a crash)."""
    chosen = cells_of(cells, selector)
    failed = [a for a in arms if a["arm"] == selector[0] and a["status"] not in ("completed", None)]
    return Evidence(sum(c["errors"] for c in chosen) + len(failed), sum(c["n"] + c["errors"] for c in chosen)
                    + len(failed), [_label(c) for c in chosen],
                    [f"arm {a['arm']} {a['status']}: {a.get('error') or 'no error recorded'}" for a in failed])


@dataclass(frozen=True)
class ClaimResult:
    """One claim answered: its evidence, interval, verdict, the power at the n it had, and the n that settles
    it (None: more than LIMIT_N)."""

    name: str
    kind: str
    claimed: str  # the claim in words, as the page says it
    source: str
    k: int
    n: int
    lower: float
    upper: float
    verdict: str
    power: float
    assurance: float
    alternative: float
    n_needed: int | None
    cells: list[str]
    notes: list[str]
    baseline_k: int | None = None  # an A/B claim's: the baseline's (A's) k of n; lower/upper bound B - A
    baseline_n: int | None = None
    scale: str = "rate"  # what lower/upper are: "rate" (a share, or B - A), "ratio" (B/A: k, n are B's, A's windows)
    estimate: float | None = None  # a ratio claim's observed B/A


def answer(name: str, kind: str, claimed: str, source: str, test: RateClaim, evidence: Evidence, target: float
           ) -> ClaimResult:
    lower, upper = test.bounds(evidence.k, evidence.n)
    return ClaimResult(name, kind, claimed, source, evidence.k, evidence.n, lower, upper,
                       test.verdict(evidence.k, evidence.n) if evidence.n else INCONCLUSIVE, test.power(evidence.n),
                       test.assurance(evidence.n), test.alternative, test.n_needed(target), evidence.cells,
                       evidence.notes)
