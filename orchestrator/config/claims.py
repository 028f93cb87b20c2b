"""A claims file (`orchestrator claims FILE`, docs/claims.md): its schema and its checks. Read as someone's input:
unknown keys with their closest field (config/keys.py), types through OmegaConf's structured merge, ranges and
cross-field rules as the catalog's lines (config/catalog.py); every problem at once, one line each, exit 2."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestrator.config.catalog import line
from orchestrator.config.keys import unknown
from orchestrator.errors import ConfigError

KINDS = ("divergence_rate", "distinct", "ab_difference", "no_top1_flip", "no_crash", "cost_ratio", "flips_at",
         "onset")
BOUNDED = ("divergence_rate", "ab_difference")  # the kinds that take at_most or at_least (a share)
SIDED = ("ab_difference", "cost_ratio")  # the kinds that compare arm (B) with a baseline (A)


@dataclass
class ClaimConfig:
    """One claim against the cells of a study: the cells (arm, phase, prompt; phase and prompt left out: all of
    them, pooled) and what is claimed of them."""

    name: str = ""
    kind: str = ""  # KINDS
    arm: str = ""
    phase: str | None = None
    prompt: str | None = None
    at_most: float | None = None  # divergence_rate: the claimed rate is at most this; ab_difference: B's less A's
    at_least: float | None = None  # the same, at least this
    baseline: str | None = None  # ab_difference: arm A (`arm` is B); left out: the same arm
    baseline_phase: str | None = None  # ab_difference: A's phase; left out: the same phase
    baseline_rate: float = 0.0  # ab_difference: A's rate at which the power is computed
    metric: str | None = None  # cost_ratio: the load point's metric (latency_s, time_to_first_token_s, ...)
    ratio: float | None = None  # cost_ratio: B costs `ratio` times A, within +-margin of it (or at_most/at_least)
    distinct: int | None = None  # distinct: `distinct` in `of` ("1 in 6": all identical; "6 in 6": all distinct)
    of: int | None = None  # distinct, flips_at: in this many requests
    flips: int | None = None  # flips_at: top-1 flips in `of` requests (0: none; else F / of a request, +-margin)
    positions: list[int] | None = None  # flips_at: the generated positions [from, to) counted (left out: all)
    onset: float | None = None  # onset: "diverges from this axis value on"
    search: str | None = None  # onset: the onset search's dir (its hydra.sweep.dir, holding onset.json)
    per: str | None = None  # onset: the search's configuration (its `per` overrides), where it has several
    margin: float | None = None  # the alternative: the claim is false by this much (default: the file's)
    source: str = ""  # where the claim was made (a URL, a thread), shown with its verdict


@dataclass
class ClaimsConfig:
    """A claims file: the confidence of every interval, the power every n is sized for, the default margin, the
    most requests a claim's cells may be given, and the claims."""

    study: str | None = None  # the study preset they are about (`--study` overrides it)
    confidence: float = 0.95
    power: float = 0.8
    margin: float = 0.1
    max_n: int = 2000
    claims: list[ClaimConfig] = field(default_factory=list)


def load(path: Path) -> ClaimsConfig:
    """The claims file, checked; every problem in one ConfigError (a line each)."""
    try:
        node = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such claims file; pass a YAML file of claims (docs/claims.md)") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not a readable YAML file ({' '.join(str(exc).split())})") from None
    if not isinstance(node, dict):
        raise ConfigError(f"{path}: a claims file is a map with a `claims:` list (docs/claims.md)")
    strays = unknown(node, ClaimsConfig, "")
    problems = [f"{path}: {text}" for _, text in strays]
    if not all(_drop(node, where.split(".")) for where, _ in strays):  # a key it cannot find again: said alone
        raise ConfigError(problems)
    try:  # the rest checked as well, with the unknown keys left out: every problem in one go
        typed: Any = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ClaimsConfig), node))
    except OmegaConfBaseException as exc:  # a wrong type: its key and value are in the message's first line
        raise ConfigError([*problems, f"{path}: {str(exc).splitlines()[0]} (full key: {exc.full_key})"]) from None
    problems += [f"{path}: {p}" for p in check(typed)]
    if problems:
        raise ConfigError(problems)
    assert isinstance(typed, ClaimsConfig)
    return typed


def _drop(node: Any, parts: list[str]) -> bool:
    """Removes the key at a dotted path of `unknown`'s (list items by index); False where it is not there."""
    *parents, last = parts
    try:
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]
    except (KeyError, IndexError, ValueError, TypeError):
        return False
    return True


def _share(name: str, value: float | None, open_low: bool = False, signed: bool = False) -> list[str]:
    low = -1 if signed else 0
    ok = value is None or (0 < value < 1 if open_low else low <= value <= 1)
    valid = "in (0, 1)" if open_low else f"in [{low}, 1]"
    return [] if ok else [line("range", name, value, valid, "give a share, e.g. 0.1 for 10 %")]


def check(claims: ClaimsConfig) -> list[str]:
    """The ranges and cross-field rules, every problem a line naming the field."""
    problems = [*_share("confidence", claims.confidence, True), *_share("power", claims.power, True),
                *_share("margin", claims.margin, True)]
    if claims.max_n < 1:
        problems.append(line("range", "max_n", claims.max_n, ">= 1", "the most requests a claim's cells get"))
    if not claims.claims:
        problems.append(line("empty", "claims", [], "a list of one or more claims", "add a claim (docs/claims.md)"))
    names = [c.name for c in claims.claims]
    for i, claim in enumerate(claims.claims):
        where = f"claims[{i}]"
        if not claim.name:
            problems.append(line("empty", f"{where}.name", "", "a name", "name the claim, e.g. its sentence"))
        elif names.count(claim.name) > 1:
            problems.append(f"{where}.name={claim.name!r}: two claims have this name; give each its own")
        if claim.kind not in KINDS:
            problems.append(line("unknown-name", f"{where}.kind", claim.kind, KINDS))
            continue
        if not claim.arm:
            problems.append(line("empty", f"{where}.arm", "", "an arm of the study", "name the arm it is about"))
        signed = claim.kind == "ab_difference"  # a difference of rates: in [-1, 1]
        problems += [*_share(f"{where}.margin", claim.margin, True), *_share(f"{where}.baseline_rate",
                     claim.baseline_rate)]
        if claim.kind != "cost_ratio":
            problems += [*_share(f"{where}.at_most", claim.at_most, signed=signed),
                         *_share(f"{where}.at_least", claim.at_least, signed=signed)]
        problems += {"cost_ratio": _cost, "flips_at": _flips, "onset": _onset}.get(claim.kind, _fields)(where, claim)
    return problems


def _fields(where: str, claim: ClaimConfig) -> list[str]:
    """What each kind takes, and nothing it does not."""
    bounds = (claim.at_most is not None) + (claim.at_least is not None)
    if claim.kind in BOUNDED and bounds != 1:
        return [f"{where}: a {claim.kind} claim takes one of at_most or at_least (the claimed "
                f"{'difference' if claim.kind == 'ab_difference' else 'rate'}), got {bounds}; e.g. `at_most: 0`"]
    if claim.kind not in BOUNDED and bounds:
        return [f"{where}: at_most/at_least are for {' and '.join(BOUNDED)} claims; a {claim.kind} claim takes none"]
    if claim.kind == "divergence_rate" and (claim.at_least == 0 or claim.at_most == 1):
        return [f"{where}: at_least 0 or at_most 1 claims nothing that could be contradicted; state a rate inside "
                "(0, 1] for at_least, [0, 1) for at_most"]
    if claim.metric is not None or claim.ratio is not None:
        return [f"{where}: metric/ratio are a cost_ratio claim's; a {claim.kind} claim takes none"]
    if claim.flips is not None or claim.positions is not None:
        return [f"{where}: flips/positions are a flips_at claim's; a {claim.kind} claim takes none"]
    if claim.onset is not None or claim.search is not None or claim.per is not None:
        return [f"{where}: onset/search/per are an onset claim's; a {claim.kind} claim takes none"]
    sides = claim.baseline is not None or claim.baseline_phase is not None
    if (claim.kind == "ab_difference") != sides:
        return [f"{where}: `baseline` (arm A) and `baseline_phase` (A's phase) are an ab_difference claim's, and "
                "one needs at least one of them"]
    if claim.kind != "distinct":
        return ([f"{where}: distinct/of are a distinct claim's; a {claim.kind} claim takes none"]
                if claim.distinct is not None or claim.of is not None else [])
    if claim.distinct is None or claim.of is None or claim.of < 1:
        return [f"{where}: a distinct claim takes `distinct: D` and `of: N` (N >= 1), as \"1 in 6 distinct\""]
    if claim.distinct not in (1, claim.of):
        return [line("range", f"{where}.distinct", claim.distinct, f"1 or {claim.of} (all identical, or all "
                     "distinct)", "for a share in between, state a divergence_rate claim")]
    return []


def _cost(where: str, claim: ClaimConfig) -> list[str]:
    """A cost ratio: B (arm) against A (baseline) at one load point (phase), a metric, and one of ratio (within
    +-margin of it), at_most or at_least, each > 0."""
    problems = [line("empty", f"{where}.{key}", "", valid, fix) for key, valid, fix in (
        ("baseline", "arm A", "name the arm B's cost is a multiple of"),
        ("phase", "a load phase", "name the load point"),
        ("metric", "a load point's metric", "e.g. latency_s, time_to_first_token_s, request_throughput_per_s"))
        if not getattr(claim, key)]
    given = [(key, value) for key, value in (("ratio", claim.ratio), ("at_most", claim.at_most),
                                             ("at_least", claim.at_least)) if value is not None]
    if len(given) != 1:
        return [*problems, f"{where}: a cost_ratio claim takes one of ratio, at_most or at_least (B's cost over "
                f"A's), got {len(given)}; e.g. `ratio: 2` (within +-margin of 2)"]
    problems += [line("range", f"{where}.{key}", value, "> 0", "a ratio B/A, e.g. 2 for twice A's")
                 for key, value in given if value <= 0]
    if any(v is not None for v in (claim.baseline_phase, claim.distinct, claim.of, claim.flips, claim.positions)):
        problems.append(f"{where}: baseline_phase, distinct/of and flips/positions are not a cost_ratio claim's (A "
                        "and B share the load point)")
    return problems


def _flips(where: str, claim: ClaimConfig) -> list[str]:
    """A flip count: `flips: F` (>= 0) in `of: N` requests (>= 1), over positions [from, to) where given."""
    if claim.flips is None or claim.of is None:
        return [f"{where}: a flips_at claim takes `flips: F` and `of: N` (F top-1 flips in N requests), e.g. "
                "`flips: 416, of: 8`"]
    problems = [line("range", f"{where}.{key}", value, valid, "a count") for key, value, valid in (
        ("flips", claim.flips, ">= 0"), ("of", claim.of, ">= 1")) if value < (0 if key == "flips" else 1)]
    span = claim.positions
    if span is not None and (len(span) != 2 or not 0 <= span[0] < span[1]):
        problems.append(line("range", f"{where}.positions", span, "[from, to] with 0 <= from < to", "generated "
                             "positions counted from 0, `to` left out"))
    if any(v is not None for v in (claim.at_most, claim.at_least, claim.baseline, claim.baseline_phase,
                                   claim.distinct, claim.metric, claim.ratio)):
        problems.append(f"{where}: a flips_at claim takes flips, of and positions (and its cells); at_most, "
                        "at_least, baseline, baseline_phase, distinct, metric and ratio are other kinds'")
    return problems


def _onset(where: str, claim: ClaimConfig) -> list[str]:
    """An onset: `onset: N` (an axis value) and `search: DIR` (the onset search's dir); its cells are the search's."""
    if claim.onset is None or not claim.search:
        return [f"{where}: an onset claim takes `onset: N` (diverges from N on) and `search: DIR` (an onset "
                "search's hydra.sweep.dir, docs/onset.md)"]
    if claim.onset <= 0:  # the searched axes (batch size, prompt length, ...) are positive, on a log scale
        return [f"{where}.onset={claim.onset:g}: must be above 0 (a value on the search's axis: a batch size, a "
                "prompt length, ...)"]
    others = [key for key in ("phase", "prompt", "at_most", "at_least", "baseline", "baseline_phase", "distinct",
                              "of", "metric", "ratio", "flips", "positions") if getattr(claim, key) is not None]
    return [f"{where}: an onset claim takes onset, search and per (its cells are the search's target); "
            f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} other kinds'"] if others else []
