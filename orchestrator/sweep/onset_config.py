"""The onset sweeper's settings (hydra/sweeper=onset, docs/onset.md): the axis and its grid, the target cells,
the width wanted, the budget; and the checks that refuse a bad search before any job starts (exit 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.keys import unknown
from orchestrator.errors import ConfigError

SWEEPER_TARGET = "hydra_plugins.orchestrator_onset.onset_sweeper.OnsetSweeper"
MAX_GRID = 4096  # grid points of an axis without `points`: every integer up to this many, else this many
OUTCOMES = ("reference", "divergent", "top1_flips")
# hydra.sweeper.expect: the answer a search must give, else exit 3 (sweep/onset.py Result.outcome)
EXPECT = {"onset": "onset", "none": "no onset in range", "not_monotone": "not monotone"}


@dataclass
class AxisConf:
    key: str = ""  # any numeric override, e.g. prompts.prompts.p.length_tokens (with + where it is new)
    low: float | None = None
    high: float | None = None
    scale: str = "linear"  # linear | log
    type: str = "int"  # int | float
    points: int | None = None  # grid points; null: every integer of an int axis (up to MAX_GRID), else MAX_GRID


@dataclass
class TargetConf:
    """The cells whose counts are pooled into each job's k of n; null: every cell on that coordinate."""

    arm: str | None = None
    prompt: str | None = None
    phase: str | None = None
    # reference: requests off the arm's reference answer (its first sequential request, else its cold one);
    # divergent: off the cell's modal answer; top1_flips: (request, position) pairs; null: reference where the
    # study has a reference answer for every target cell, else divergent (`resolve_outcome`)
    outcome: str | None = None


@dataclass
class OnsetSettings:
    axis: AxisConf = field(default_factory=AxisConf)
    target: TargetConf = field(default_factory=TargetConf)
    # wanted width of the credible interval: axis units (b - a) on a linear axis, a ratio (b / a) on a log one;
    # null: one grid step (the interval's ends neighbours in the grid)
    width: float | None = None
    confidence: float = 0.95
    max_jobs: int = 24  # per configuration of `per`
    max_requests: int | None = None  # per configuration: requests sent, all jobs together
    round_size: int = 1  # jobs launched together (a parallel launcher runs them at once)
    per: list[str] = field(default_factory=list)  # one onset each: space-separated overrides, e.g. "a=1 b=2"
    budget_tokens: int | None = None  # a declared budget the first divergence's absolute position is read against
    bayes_factor_islands: float = 20.0  # two change points over one: above this, "not monotone"
    prior_below: list[float] = field(default_factory=lambda: [1.0, 4.0])  # Beta(a, b) below the onset
    prior_above: list[float] = field(default_factory=lambda: [1.0, 1.0])  # at and above it
    expect: str | None = None  # onset | none | not_monotone: any other answer exits 3; null: no expectation


def settings(node: Any) -> OnsetSettings:
    """The sweeper's node (hydra.sweeper) as typed settings; a wrong key or type is one line, exit 2."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    raw = OmegaConf.to_container(node, resolve=True) if not isinstance(node, dict) else dict(node)
    assert isinstance(raw, dict)
    raw.pop("_target_", None)
    if found := unknown(raw, OnsetSettings, "hydra.sweeper"):  # each with its closest key, all at once
        raise ConfigError([line for _, line in found])
    try:
        merged = OmegaConf.merge(OmegaConf.structured(OnsetSettings), raw)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"hydra.sweeper (onset): {' '.join(str(exc).split())}") from exc
    typed = OmegaConf.to_object(merged)
    assert isinstance(typed, OnsetSettings)
    return typed


def grid(axis: AxisConf) -> list[float]:
    """The axis's candidate points, ascending (ints rounded and deduplicated)."""
    assert axis.low is not None and axis.high is not None
    low, high = axis.low, axis.high
    if axis.type == "int" and axis.points is None and high - low + 1 <= MAX_GRID and axis.scale == "linear":
        return [float(v) for v in range(int(low), int(high) + 1)]
    count = axis.points or MAX_GRID
    if axis.scale == "log":
        values = [math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / (count - 1)) for i in range(count)]
    else:
        values = [low + i * (high - low) / (count - 1) for i in range(count)]
    if axis.type == "int":
        return [float(v) for v in sorted({round(v) for v in values})]
    return values


def positions(axis: AxisConf, points: list[float]) -> list[float] | None:
    """The grid in the axis's measure, where the onset's prior is uniform and the first round evenly spread:
    log x on a log axis; None on a linear one (its grid is evenly spaced: the indices serve)."""
    return [math.log(x) for x in points] if axis.scale == "log" else None


def width_of(axis: AxisConf, a: float, b: float) -> float:
    """An interval's width as `width` reads it: b - a, or b / a on a log axis."""
    return b / a if axis.scale == "log" else b - a


def value_text(axis: AxisConf, value: float) -> str:
    return str(int(value)) if axis.type == "int" else f"{value:.6g}"


def problems(s: OnsetSettings) -> list[str]:
    """What is wrong with the settings alone (the composed study is checked by `check`)."""
    a, out = s.axis, []
    if not a.key:
        out.append("hydra.sweeper.axis.key is not set: name the numeric override to search, e.g. "
                   "hydra.sweeper.axis.key=prompts.prompts.p.length_tokens")
    if a.low is None or a.high is None:
        out.append("hydra.sweeper.axis.low and .high are needed: the range to search, e.g. low=64 high=4096")
    elif not a.low < a.high:
        out.append(f"hydra.sweeper.axis: the range [{a.low}, {a.high}] is empty: set low < high")
    elif a.scale == "log" and a.low <= 0:
        out.append(f"hydra.sweeper.axis.low={a.low} on a log axis: a log axis needs low > 0 (or scale=linear)")
    elif a.type == "int" and (a.low != int(a.low) or a.high != int(a.high)):
        out.append(f"hydra.sweeper.axis: an int axis needs whole bounds, got [{a.low}, {a.high}] (or type=float)")
    if a.scale not in ("linear", "log"):
        out.append(f"hydra.sweeper.axis.scale={a.scale}: use linear or log")
    if a.type not in ("int", "float"):
        out.append(f"hydra.sweeper.axis.type={a.type}: use int or float")
    if a.points is not None and a.points < 2:
        out.append(f"hydra.sweeper.axis.points={a.points}: a grid needs at least 2 points")
    if s.width is not None and s.width <= (1 if a.scale == "log" else 0):
        out.append(f"hydra.sweeper.width={s.width} on a log axis: there it is a ratio (the interval's ends within "
                   "that factor), use a number > 1, e.g. 1.25" if a.scale == "log" else
                   f"hydra.sweeper.width={s.width}: use a positive width in axis units (or null: one grid step)")
    if s.expect is not None and s.expect not in EXPECT:
        out.append(f"hydra.sweeper.expect={s.expect}: use {', '.join(EXPECT)} (or null: no expectation)")
    if s.target.outcome is not None and s.target.outcome not in OUTCOMES:
        out.append(f"hydra.sweeper.target.outcome={s.target.outcome}: use one of {', '.join(OUTCOMES)}")
    if not 0.5 <= s.confidence < 1:
        out.append(f"hydra.sweeper.confidence={s.confidence}: use a level in [0.5, 1), e.g. 0.95")
    if s.max_jobs < 2 or s.round_size < 1:
        out.append("hydra.sweeper.max_jobs must be >= 2 and round_size >= 1")
    for name, prior in (("prior_below", s.prior_below), ("prior_above", s.prior_above)):
        if len(prior) != 2 or min(prior) <= 0:
            out.append(f"hydra.sweeper.{name}={prior}: a Beta prior is two positive numbers [a, b]")
    return out


def per_overrides(s: OnsetSettings) -> list[list[str]]:
    """Each configuration's own overrides (one, empty, without `per`)."""
    return [entry.split() for entry in s.per] or [[]]


def axis_value_problem(key: str, value: Any) -> str | None:
    """The axis key's value in the composed study, where it has one: it must be a number."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return None
    return (f"hydra.sweeper.axis.key={key} is {value!r} in the study, not a number: the axis takes a numeric "
            "override (an int or a real)")


def target_problems(target: TargetConf, arms: list[str], prompts: list[str], phases: list[str]) -> list[str]:
    out = []
    for name, given, known in (("arm", target.arm, arms), ("prompt", target.prompt, prompts),
                               ("phase", target.phase, phases)):
        if given is not None and given not in known:
            out.append(f"hydra.sweeper.target.{name}={given}: the study has no such {name} (it has "
                       f"{', '.join(known) or 'none'})")
    return out


def resolve_outcome(s: OnsetSettings, phase_kinds: list[str], prompts: list[str]) -> None:
    """target.outcome null -> `reference` where every target cell has a reference answer, else `divergent`; an
    explicit `reference` without one is refused (exit 2). The arm's reference answer for a prompt is the first
    request of its first sequential phase, else its cold request, which is sent for the first prompt only."""
    cold_covers = bool(prompts) and (s.target.prompt == prompts[0] or (s.target.prompt is None and len(prompts) == 1))
    has = "sequential" in phase_kinds or cold_covers
    if s.target.outcome is None:
        s.target.outcome = "reference" if has else "divergent"
    elif s.target.outcome == "reference" and not has:
        raise ConfigError("hydra.sweeper.target.outcome=reference: a target cell has no reference answer (the study "
                          "has no sequential phase, and its cold request is of the first prompt only): add a "
                          "sequential phase, target the first prompt, or use target.outcome=divergent")
