"""`orchestrator claims`'s page: the verdict first (how many claims were contradicted, replicated, inconclusive),
then a row per claim (the interval, the power at its n, the n that settles it), then how each was checked; as
claims.md, claims.html (report.html's page frame) and claims.json."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from orchestrator.analysis.claims import CONTRADICTED, INCONCLUSIVE, LIMIT_N, REPLICATED, ClaimResult
from orchestrator.config.claims import ClaimsConfig
from orchestrator.record.paths import atomic_write_text
from orchestrator.report.html import SCRIPT, STYLE, markdown_to_html
from orchestrator.report.table import markdown_table, pct


@dataclass(frozen=True)
class Pages:
    markdown: Path
    html: Path
    json: Path
    summary: list[str]  # the verdict and a line per claim, for the terminal


COST_METHOD = ("A cost ratio B/A is the report's (paired over windows of one schedule, else Welch's t on the "
               "windows' logs), its interval at the claims' confidence. Contradicted: the interval lies wholly "
               "outside the claimed band (ratio +- margin, or the side at_most/at_least names); replicated: wholly "
               "inside it. The windows that would settle it are an estimate from the pilot's variance: its spread "
               "of log ratios and its ratio taken as the truth's.")


FLIPS_METHOD = ("A flip count is read from the record: each request's generated tokens against its cell's "
                "reference request (the first of the modal signature), a flip where both have a token and they "
                "differ. \"0 flips\" is a rate (requests with a flip, at most 0); F flips in N requests a mean of "
                "F / N a request +- margin, its interval Student's t on the requests' counts, the requests that "
                "would settle it an estimate from the pilot's spread.")


def verdict_line(results: list[ClaimResult]) -> str:
    counts = {v: sum(r.verdict == v for r in results) for v in (CONTRADICTED, REPLICATED, INCONCLUSIVE)}
    return (f"{counts[CONTRADICTED]} of {len(results)} claims contradicted, {counts[REPLICATED]} replicated, "
            f"{counts[INCONCLUSIVE]} inconclusive")


BANDED = {"ratio": ("windows a side", "B/A", "{:.3g}x"), "count": ("requests", "mean", "{:.3g} a request")}
"""Claims against a band, by scale: what the n counts, what the estimate is called, how a value reads."""


def value(result: ClaimResult, number: float) -> str:
    return BANDED[result.scale][2].format(number)


def settles(result: ClaimResult) -> str:
    if result.scale == "onset":
        return "run the search further" if result.verdict == INCONCLUSIVE else "-"
    if result.scale in BANDED:
        return "cannot size" if result.n_needed is None else f"{result.n_needed} {BANDED[result.scale][0]} (estimate)"
    return f"> {LIMIT_N}" if result.n_needed is None else str(result.n_needed)


def counts(result: ClaimResult) -> str:
    """k of n; an A/B claim's: B's, then A's; a ratio claim's: the windows each side counted."""
    if result.scale == "ratio":
        return f"windows B {result.k}, A {result.n}"
    if result.scale == "count":
        return f"{result.k} flips in {result.n} requests"
    if result.scale == "onset":
        return f"{result.k} points, {result.n} requests"
    if result.baseline_n is None:
        return f"{result.k} of {result.n}"
    return f"B {result.k} of {result.n}, A {result.baseline_k} of {result.baseline_n}"


def interval(result: ClaimResult) -> str:
    if result.scale == "onset":
        return (f"after {'the range' if math.isnan(result.lower) else f'{result.lower:g}'}, at or before "
                f"{'past the range' if math.isnan(result.upper) else f'{result.upper:g}'}")
    if result.scale in BANDED:
        return "none" if math.isnan(result.lower) else f"{value(result, result.lower)} to {value(result, result.upper)}"
    return f"{signed(result.lower)} to {signed(result.upper)}" if result.baseline_n is not None \
        else f"{pct(result.lower)} to {pct(result.upper)}"


def alternative(result: ClaimResult) -> str:
    if result.scale != "rate":
        return "-"
    return signed(result.alternative) if result.baseline_n is not None else pct(result.alternative)


def signed(value: float) -> str:
    """A difference of rates in points: -3.1 %, +12 %."""
    return ("-" if value < 0 else "+") + pct(abs(value))


def sentence(result: ClaimResult, claims: ClaimsConfig) -> str:
    """What the verdict rests on, in one sentence."""
    if result.scale in BANDED:
        return band_sentence(result, claims)
    if result.scale == "onset":
        return (f"the search's onset {interval(result)}: "
                + {CONTRADICTED: "a bracket that excludes the claim", REPLICATED: "the claim inside it",
                   INCONCLUSIVE: "not settled where the claim lies"}[result.verdict] + f" ({result.claimed}).")
    head = f"{counts(result)}: {'B - A' if result.baseline_n is not None else 'rate'} {interval(result)} " \
           f"({pct(claims.confidence)})"
    return _against(head, result, f"an interval that excludes the alternative ({alternative(result)})",
                    f"it holds both the claim and its alternative ({alternative(result)}); n = {settles(result)} "
                    f"would settle it (power {pct(claims.power)})")


def _against(head: str, result: ClaimResult, replicated: str, inconclusive: str) -> str:
    """The sentence's end by verdict: what the interval excludes, holds, or straddles."""
    if result.verdict == CONTRADICTED:
        return f"{head}, an interval that excludes the claim ({result.claimed})."
    return f"{head}, {replicated}." if result.verdict == REPLICATED else f"{head}: {inconclusive}."


def band_sentence(result: ClaimResult, claims: ClaimsConfig) -> str:
    """A cost ratio's or a flip count's: the estimate and its interval against the claimed band."""
    name = BANDED[result.scale][1]
    if math.isnan(result.lower):
        seen = f"no {name}" if result.estimate is None else f"{name} {value(result, result.estimate)}"
        return f"{counts(result)}: {seen}, no interval ({'; '.join(result.notes[1:]) or result.notes[0]})."
    head = (f"{counts(result)}: {name} {value(result, result.estimate or 0)}, {interval(result)} "
            f"({pct(claims.confidence)})")
    return _against(head, result, f"an interval inside the claim ({result.claimed})",
                    f"it straddles the claim's edge ({result.claimed}); {settles(result)} would settle it (power "
                    f"{pct(claims.power)}, an estimate from the pilot's variance)")


def power_words(result: ClaimResult) -> str:
    """What the power at n means, for the page."""
    if result.scale == "onset":  # no power: the search's own bracket
        return f"{result.notes[1].capitalize()}: no power of its own."
    if result.scale in BANDED:
        n = min(result.k, result.n) if result.scale == "ratio" else result.n
        return (f"Chance that {n} {BANDED[result.scale][0]} settle it: {pct(result.power)}, were the pilot's "
                f"{BANDED[result.scale][1]} and spread the truth's.")
    truth = "B - A" if result.baseline_n is not None else "the rate"
    return (f"Power at n = {result.n}: {pct(result.power)} to contradict it were {truth} {alternative(result)}; "
            f"{pct(result.assurance)} to replicate it were it true.")


def markdown(results: list[ClaimResult], claims: ClaimsConfig, runs: list[Path], provenance: list[str]) -> str:
    rows = [[r.name, r.claimed, r.verdict.upper() if r.verdict == CONTRADICTED else r.verdict, counts(r), interval(r),
             alternative(r), "-" if math.isnan(r.power) else pct(r.power), settles(r)]
            for r in results]
    lines = ["# Claims checked", "", f"**{verdict_line(results)}.**", "",
             *markdown_table(["claim", "claimed", "verdict", "k of n", f"interval ({pct(claims.confidence)})",
                              "alternative", "power at n", "n that settles it"], rows),
             "## How each was checked", ""]
    for r in results:
        lines += [f"- **{r.name}**: {sentence(r, claims)} {power_words(r)}"
                  + (f" Source: {r.source}." if r.source else ""),
                  f"  - cells: {', '.join(r.cells) or 'none'}", *(f"  - {n}" for n in r.notes)]
    lines += ["", "## Method", "",
              f"Each claim is a rate over its cells' measured requests (pooled). The interval is the report's "
              f"(one-sided upper bound when nothing diverged, else Clopper-Pearson) at {pct(claims.confidence)}. "
              "Contradicted: the interval lies wholly outside what is claimed. Replicated: it lies wholly short of "
              "the alternative (the claim off by its margin). Inconclusive: neither. Power: the chance the check "
              "contradicts the claim were the truth the alternative (exact, binomial). The n that settles it: the "
              f"fewest requests at which that power and the chance to replicate a true claim both reach "
              f"{pct(claims.power)}.", *(["", COST_METHOD] if any(r.scale == "ratio" for r in results) else []),
              *(["", FLIPS_METHOD] if any(r.kind == "flips_at" for r in results) else []), "",
              f"Evidence: {', '.join(f'`{r}`' for r in runs) or 'none'}.", *([""] if provenance else []),
              *(f"- {line}" for line in provenance),
              ""]
    return "\n".join(lines)


def to_html(text: str) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
            "content='width=device-width'><title>Claims checked</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(markdown_to_html(text))
            + f"\n<script>{SCRIPT}</script>\n</body></html>\n")


def write(results: list[ClaimResult], claims: ClaimsConfig, runs: list[Path], out: Path,
          provenance: list[str] | None = None) -> Pages:
    """`provenance`: an imported run dir's line each (what its source lacked), on the page and the terminal."""
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out / "claims.md", out / "claims.html", out / "claims.json",
                  [f"{verdict_line(results)}.",
                   *(f"  {r.verdict}: {r.name}: {sentence(r, claims)} " + (
                       f"Power at n = {r.n}: {pct(r.power)}." if r.scale == "rate" else power_words(r))
                     for r in results), *(provenance or [])])
    text = markdown(results, claims, runs, provenance or [])
    atomic_write_text(pages.markdown, text)
    atomic_write_text(pages.html, to_html(text))
    atomic_write_text(pages.json, json.dumps(
        {"verdict": verdict_line(results), "confidence": claims.confidence, "power": claims.power,
         "max_n": claims.max_n, "runs": [str(r) for r in runs],
         "claims": [_finite(dataclasses.asdict(r)) for r in results]}, indent=2) + "\n")
    return pages


def _finite(fields: dict[str, object]) -> dict[str, object]:
    """NaN (a ratio claim without an interval) as null: JSON has no NaN."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in fields.items()}
