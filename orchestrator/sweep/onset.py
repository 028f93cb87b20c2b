"""The onset search (hydra/sweeper=onset, docs/onset.md): rounds of jobs along one axis, each job's target
cells read as k divergent of n, the change-point posterior (analysis/onset.py) after each round, the next
points where they most reduce its entropy, until the interval is narrow enough, the answer is another
("no onset in range", "not monotone"), or the budget is spent. One search per configuration of `per`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.analysis import onset as model
from orchestrator.errors import counted
from orchestrator.record.paths import RunPaths
from orchestrator.sweep.onset_config import OnsetSettings, TargetConf, positions, value_text, width_of
from orchestrator.sweep.onset_state import Configuration, Job, OnsetState

# A launch: (overrides of each job, the first job's number) -> (exit status, run dir) of each job, in order
Launch = Callable[[list[list[str]], int], list[tuple[int, Path]]]


@dataclass
class Reading:
    """What one job's run dir says of the target cells."""

    k: int | None
    n: int | None
    requests: int
    prompt_tokens: int | None
    first_divergent_position: int | None
    first_logprob_position: int | None = None
    note: str = ""


# target.outcome -> the cells' report.json fields of k and of n (top1_flips: n is (n - 1) x the job's max_tokens)
COUNTS = {"reference": ("off_reference", "off_reference_of"), "divergent": ("divergent", "n"),
          "top1_flips": ("top1_flips", "n")}


def read_job(run_dir: Path, target: TargetConf) -> Reading:
    """The target cells of RUN/report.json pooled: requests off the arm's reference answer or off the modal one,
    of n, or top-1 flips of the (request, position) pairs compared, taken as (n - 1) x the job's max_tokens."""
    path = run_dir / "report.json"
    if not path.is_file():
        return Reading(None, None, 0, None, None, note=f"no report.json in {run_dir}")
    report = json.loads(path.read_text())
    cells = report.get("cells", [])
    requests = sum(int(c.get("n") or 0) + int(c.get("errors") or 0) for c in cells) + len(report.get("cold") or [])
    chosen = [c for c in cells if all(want is None or c.get(key) == want for key, want in
                                      (("arm", target.arm), ("prompt_id", target.prompt), ("phase", target.phase)))]
    assert target.outcome is not None, "chosen before the search (onset_run.resolved)"
    k_field, n_field = COUNTS[target.outcome]
    answered = [c for c in chosen if c.get("n")]
    counted = [c for c in answered if c.get(k_field) is not None]
    if not counted or len(counted) < len(answered):
        missing = "no target cell with an answer" if not answered else (
            "no reference answer (a sequential request or the cold one) for "
            + ", ".join(f"{c['arm']}/{c['prompt_id']}/{c['phase']}" for c in answered if c.get(k_field) is None))
        return Reading(None, None, requests, None, None, note=missing)
    k, n = sum(int(c[k_field]) for c in counted), sum(int(c[n_field]) for c in counted)
    if target.outcome == "top1_flips":
        max_tokens = _max_tokens(run_dir)
        if max_tokens is None:
            return Reading(None, None, requests, None, None, note=f"no protocol.request.max_tokens in {run_dir}/.hydra")
        n = sum((int(c["n"]) - 1) * max_tokens for c in counted)
        k = min(k, n)
    firsts = [c["first_divergent_position"] for c in counted if c.get("first_divergent_position") is not None]
    parts = [c["first_logprob_position"] for c in counted if c.get("first_logprob_position") is not None]
    return Reading(k, n, requests, _prompt_tokens(run_dir, chosen), min(firsts, default=None), min(parts, default=None))


def _max_tokens(run_dir: Path) -> int | None:
    """The job's own protocol.request.max_tokens (an axis may change it), as its .hydra/config.yaml records it."""
    from omegaconf import OmegaConf

    saved = RunPaths(run_dir).hydra / "config.yaml"
    value = OmegaConf.select(OmegaConf.load(saved), "protocol.request.max_tokens", default=None) \
        if saved.is_file() else None
    return int(value) if value is not None else None


def _prompt_tokens(run_dir: Path, cells: list[dict[str, Any]]) -> int | None:
    """The server's usage.prompt_tokens of the target cells' requests, their most common value (the job's ledger:
    record/ledger.py, the one reader of a run's tables)."""
    from orchestrator.record.ledger import Reads  # pyarrow: only where a job is read

    table = Reads(RunPaths(run_dir)).ledger()
    keys = {(c["arm"], c["prompt_id"]) for c in cells}
    seen = Counter(t for a, p, t in zip(*(table.column(n).to_pylist() for n in ("arm", "prompt_id", "prompt_tokens")),
                                        strict=True) if (a, p) in keys and t is not None)
    return seen.most_common(1)[0][0] if seen else None


@dataclass
class Result:
    outcome: str  # onset | no onset in range | not monotone | undecided
    line: str  # the answer in one line
    interval: tuple[float | None, float | None] | None  # onset after the first, at or before the second
    mass: float | None
    width: float | None  # b - a; b / a on a log axis
    width_met: bool
    below: dict[str, Any] | None  # pooled rate of the points below the interval: k, n, lower, upper
    above: dict[str, Any] | None
    islands: dict[str, Any] | None
    posterior: list[float]
    stop: str = ""  # why the search ended: width, decided, budget (jobs), budget (requests); "" while it runs


def summarize(s: OnsetSettings, grid: list[float], jobs: list[Job]) -> Result:
    m, priors, c = len(grid), priors_of(s, grid), s.confidence
    obs = observations(jobs)
    post = model.posterior(m, obs, priors)
    k_all, n_all = model.counts(m, obs)
    isl = model.islands(m, obs, priors.places)
    islands = None if isl is None else {
        "bayes_factor": isl.bayes_factor, "rates": list(isl.rates), "island": isl.island,
        "segments": [[_at(grid, a), _at(grid, b)] for a, b in isl.segments]}
    pct = f"{c:.0%}".replace("%", " %")
    base = dict(interval=None, mass=None, width=None, width_met=False, below=None, above=None, islands=islands,
                posterior=post.tolist())
    if not obs:
        return Result("undecided", "no job answered yet", **base)
    if isl is not None and isl.island and isl.bayes_factor >= s.bayes_factor_islands:
        shape = " -> ".join("-" if r is None else f"{r:.2f}" for r in isl.rates)
        return Result("not monotone", f"not monotone: several change points suspected (rates {shape} along the "
                      f"axis; Bayes factor two change points / one = {isl.bayes_factor:.3g})", **base)
    every = asdict(model.pooled_rate(k_all, n_all, c))
    lo_text, hi_text = value_text(s.axis, grid[0]), value_text(s.axis, grid[-1])
    # tau = m and tau = 0 both say "one rate throughout": no change in range, told apart by that rate
    if post[m] + post[0] >= c and post[m] >= post[0]:
        return Result("no onset in range", f"no onset in [{lo_text}, {hi_text}] at {pct}: divergence at most "
                      f"{every['upper']:.3g} over {every['n']} requests at {int((n_all > 0).sum())} points",
                      **{**base, "below": every, "mass": float(post[m] + post[0])})
    if post[m] + post[0] >= c:
        return Result("no onset in range", f"no onset in [{lo_text}, {hi_text}] at {pct}: it diverges throughout "
                      f"(rate at least {every['lower']:.3g}); any onset is below {lo_text}",
                      **{**base, "above": every, "mass": float(post[m] + post[0])})
    ci = snapped(model.credible_interval(post, c), n_all, post)
    a = grid[ci.lo - 1] if ci.lo >= 1 else None
    b = grid[ci.hi] if ci.hi < m else None
    below = asdict(model.pooled_rate(k_all[:ci.lo], n_all[:ci.lo], c))
    above = asdict(model.pooled_rate(k_all[ci.hi:], n_all[ci.hi:], c))
    width = None if a is None or b is None else width_of(s.axis, a, b)
    met = width is not None and (ci.hi == ci.lo if s.width is None else width <= s.width + 1e-12)
    fields = {**base, "interval": (a, b), "mass": ci.mass, "width": width, "below": below, "above": above,
              "width_met": met}
    ends = (f"{'below ' + lo_text if a is None else value_text(s.axis, a)}, "
            f"{'above ' + hi_text if b is None else value_text(s.axis, b)}")
    rates = f"{_rate('below', below)}, {_rate('above', above).removeprefix('rate ' if below['n'] else '')}"
    if a is None or b is None:
        return Result("undecided", f"onset in [{ends}] at {pct}, reaching past the range: {rates}",
                      **fields)
    return Result("onset", f"onset in [{ends}] at {pct} (after {value_text(s.axis, a)}, by "
                  f"{value_text(s.axis, b)}): {rates}", **fields)


def snapped(ci: model.Interval, n: np.ndarray, post: np.ndarray) -> model.Interval:
    """The interval widened to the measured points around it: between two measured points the posterior is
    flat, so a shortest interval would cut that stretch at an arbitrary place. Its ends are then a point
    measured below the onset and one measured above it."""
    seen = np.flatnonzero(n)
    below, above = seen[seen < ci.lo], seen[seen >= ci.hi]
    lo = int(below[-1]) + 1 if len(below) else 0
    hi = int(above[0]) if len(above) else len(n)
    return model.Interval(lo, hi, float(post[lo:hi + 1].sum()))


def _rate(side: str, r: dict[str, Any]) -> str:
    """The pooled rate of the points measured on one side of the interval; an interval reaching past the range
    holds every measured point on that side (the counts are then in the jobs' table, not here)."""
    if not r["n"]:
        return f"no point measured {side} the interval"
    return f"rate {side} {r['k']}/{r['n']} ({r['lower']:.2f}-{r['upper']:.2f})"


def _at(grid: list[float], index: int) -> float | None:
    return grid[index] if 0 <= index < len(grid) else None


def priors_of(s: OnsetSettings, grid: list[float]) -> model.Priors:
    """The rates' Beta priors; the onset's place uniform in the axis's measure (log x on a log axis)."""
    measure = positions(s.axis, grid)
    places = None if measure is None else tuple(float(w) for w in np.diff(measure))
    return model.Priors((s.prior_below[0], s.prior_below[1]), (s.prior_above[0], s.prior_above[1]), places)


# A job's exit statuses whose counts are evidence: it ran (0), or ran and a gate failed (3). A failed measurement
# (an engine that died, 4) may have counted only the requests before it died: none of its counts is used.
MEASURED_STATUSES = (0, 3)


def observations(jobs: list[Job]) -> list[model.Observation]:
    return [model.Observation(j.index, j.k, j.n) for j in jobs
            if j.k is not None and j.n and j.status in MEASURED_STATUSES]


def failed_jobs(jobs: list[Job]) -> list[Job]:
    return [j for j in jobs if j.status not in MEASURED_STATUSES]


def stop_reason(s: OnsetSettings, c: Configuration, result: Result) -> str:
    if result.outcome in ("no onset in range", "not monotone"):
        return "decided"
    if result.outcome == "onset" and result.width_met:
        return "width"
    if len(c.jobs) >= s.max_jobs:
        return "budget (jobs)"
    if s.max_requests is not None and sum(j.requests for j in c.jobs) >= s.max_requests:
        return "budget (requests)"
    return ""


def next_points(s: OnsetSettings, grid: list[float], c: Configuration) -> list[int]:
    count = min(s.round_size, s.max_jobs - len(c.jobs))
    obs = observations(c.jobs)
    if not obs:
        tried = {j.index for j in c.jobs}
        spread = model.spread_points(len(grid), count + len(tried), positions(s.axis, grid))
        return [i for i in spread if i not in tried][:count]
    n = int(np.median([o.n for o in obs]))
    return model.choose_points(len(grid), obs, priors_of(s, grid), n, count)


def search(s: OnsetSettings, state: OnsetState, sweep_dir: Path, launch: Launch,
           after_round: Callable[[OnsetState], None]) -> OnsetState:
    """Rounds until every configuration is done; each round launches the next points of every configuration
    not done in one batch (a parallel launcher runs them together)."""
    try:
        return _rounds(s, state, sweep_dir, launch, after_round)
    except KeyboardInterrupt:  # the report says so, and names the job dirs the round left
        state.stopped(sweep_dir)
        after_round(state)
        raise


def _rounds(s: OnsetSettings, state: OnsetState, sweep_dir: Path, launch: Launch,
            after_round: Callable[[OnsetState], None]) -> OnsetState:
    grid = state.grid
    for c in state.configurations:
        _settle(s, grid, c)
    after_round(state)
    while open_ := [c for c in state.configurations if not c.done]:
        planned = [(c, i) for c in open_ for i in next_points(s, grid, c)]
        for c in {id(c): c for c in open_}.values():
            if not any(p is c for p, _ in planned):  # a grid of a few points, every one tried and failed
                c.done, c.result = True, {**(c.result or {}), "stop": "no point left to try"}
        if not planned:
            break
        batch = [[*state.arguments, *c.per, f"{s.axis.key}={value_text(s.axis, grid[i])}"] for c, i in planned]
        first = state.first_free(sweep_dir)
        for number, ((c, index), (status, run_dir)) in enumerate(zip(planned, launch(batch, first), strict=True)):
            reading = read_job(run_dir, s.target)
            where = run_dir.relative_to(sweep_dir) if run_dir.is_relative_to(sweep_dir) else run_dir
            c.jobs.append(Job(first + number, grid[index], index, str(where), status, reading.k, reading.n,
                              reading.requests, reading.prompt_tokens, reading.first_divergent_position,
                              reading.note, reading.first_logprob_position))
        for c in open_:
            _settle(s, grid, c)
        after_round(state)
    return state


def _settle(s: OnsetSettings, grid: list[float], c: Configuration) -> None:
    result = summarize(s, grid, c.jobs)
    if failed := failed_jobs(c.jobs):
        result.line += (f"; {counted(len(failed), 'job')} failed and are not counted (job "
                        + ", ".join(f"{j.job} at {value_text(s.axis, j.value)}: status {j.status}" for j in failed)
                        + ")")
    result.stop = stop_reason(s, c, result)
    c.result, c.done = asdict(result), bool(result.stop)
