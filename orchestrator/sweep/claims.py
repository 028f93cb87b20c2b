"""`orchestrator claims FILE`: each claim of a claims file (config/claims.py) checked on the cells of run dirs
(`--run`), of a study run here (`--study`, through `run`'s own path: sweep/app.py `run_with_hydra`, with each
claim's phase given the requests its sized n needs beyond what the run dirs hold), or both; answered by
analysis/claims.py and written by report/claims.py. Exit 3 when a claim is contradicted (docs/claims.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analysis import claims as rates
from orchestrator.analysis import claims_ab, claims_cost, claims_flips
from orchestrator.analysis.claims import ClaimResult, Evidence, RateClaim, Selector
from orchestrator.analysis.claims_ab import DifferenceClaim
from orchestrator.config.catalog import line
from orchestrator.config.claims import ClaimConfig, ClaimsConfig, load
from orchestrator.config.schema import Config, PhaseKind
from orchestrator.config.search import CommandLine
from orchestrator.console import Outcome, answer, note
from orchestrator.errors import ConfigError, ExitStatus
from orchestrator.record.recorded import RecordedRun
from orchestrator.run.send.protocol import cell_requests
from orchestrator.sweep import claims_onset


@dataclass
class Cells:
    """The run dirs' cells (report.json's, or re-made from the record) and arms, pooled; the dirs they came from."""

    cells: list[dict[str, Any]]
    arms: list[dict[str, Any]]
    runs: list[Path]
    costs: list[list[dict[str, Any]]] = field(default_factory=list)  # each run's cost.phases (load points)
    records: list[RecordedRun] = field(default_factory=list)  # each run's record (a flip count reads it)

    @classmethod
    def read(cls, run_dirs: list[Path]) -> Cells:
        from orchestrator.report.build import read_sources
        from orchestrator.report.matrix import report_of

        cells: list[dict[str, Any]] = []
        arms: list[dict[str, Any]] = []
        costs: list[list[dict[str, Any]]] = []
        runs = read_sources(run_dirs)
        for run in runs:
            report = report_of(run)
            cells += report.get("cells") or []
            arms += report.get("arms") or []
            costs.append((report.get("cost") or {}).get("phases") or [])
        return cls(cells, arms, list(run_dirs), costs, runs)

    def load_points(self, arm: str, phase: str | None) -> list[dict[str, Any]]:
        """The arm's cost at the load point, a PhaseCost dict per run that has it."""
        return [p for run in self.costs for p in run if p["arm"] == arm and p["phase"] == phase]


def _selector(claim: ClaimConfig) -> Selector:
    return claim.arm, claim.phase, claim.prompt


def _bound(claim: ClaimConfig) -> tuple[float, bool]:
    """The claimed value and whether it is a lower one (at_least); the config checked one is set."""
    return float(claim.at_least if claim.at_least is not None else claim.at_most or 0.0), claim.at_least is not None


def _test(claim: ClaimConfig, claims: ClaimsConfig) -> tuple[RateClaim, str]:
    """The claim as a rate: its test and its words."""
    margin = claims.margin if claim.margin is None else claim.margin
    if claim.kind == "divergence_rate":
        claimed, at_least = _bound(claim)
        return (RateClaim(claimed, at_least, margin, claims.confidence),
                f"divergence rate {'>=' if at_least else '<='} {claimed:g}")
    words = {"distinct": f"{claim.distinct} distinct in {claim.of} "
                         f"({'all identical' if claim.distinct == 1 else 'all distinct'})",
             "no_top1_flip": "no request flips a top-1 token", "no_crash": "no request or start fails"}
    return RateClaim(0.0, False, margin, claims.confidence), words[claim.kind]


EVIDENCE = {"divergence_rate": rates.divergence, "no_top1_flip": rates.flipped}


def _evidence(claim: ClaimConfig, found: Cells) -> Evidence:
    if claim.kind == "no_crash":
        return rates.crashes(found.cells, found.arms, _selector(claim))
    if claim.kind == "distinct":
        return (rates.divergence if claim.distinct == 1 else rates.sharing)(found.cells, _selector(claim))
    return EVIDENCE[claim.kind](found.cells, _selector(claim))


def _answer(claim: ClaimConfig, claims: ClaimsConfig, found: Cells) -> ClaimResult:
    margin = claims.margin if claim.margin is None else claim.margin
    if claim.kind == "cost_ratio":
        band, words = claims_cost.test_of(claim.ratio, claim.at_most, claim.at_least, margin, claims.confidence)
        return claims_cost.answer(claim.name, f"{claim.metric}: {words}", claim.source, band, found.load_points(
            claim.baseline or "", claim.phase), found.load_points(claim.arm, claim.phase), claim.metric or "",
            claims.power)
    if claim.kind == "flips_at":
        return _flips(claim, claims, found)
    if claim.kind == "onset":
        return claims_onset.answer(claim, f"claims[{claims.claims.index(claim)}]")
    if claim.kind != "ab_difference":
        test, words = _test(claim, claims)
        return rates.answer(claim.name, claim.kind, words, claim.source, test, _evidence(claim, found), claims.power)
    claimed, at_least = _bound(claim)
    difference = DifferenceClaim(claimed, at_least, claims.margin if claim.margin is None else claim.margin,
                                 claims.confidence, claim.baseline_rate)
    a_side = (claim.baseline or claim.arm, claim.baseline_phase or claim.phase, claim.prompt)
    words = (f"{'/'.join(filter(None, _selector(claim)[:2]))}'s divergence rate less "
             f"{'/'.join(filter(None, a_side[:2]))}'s {'>=' if at_least else '<='} {claimed:g}")
    a = rates.divergence(found.cells, a_side)
    return claims_ab.answer(claim.name, words, claim.source, difference, a, rates.divergence(
        found.cells, _selector(claim)), claims.power)


def _flips(claim: ClaimConfig, claims: ClaimsConfig, found: Cells) -> ClaimResult:
    """F top-1 flips in N requests (over positions [from, to)), read from the runs' records."""
    margin = claims.margin if claim.margin is None else claim.margin
    span = (claim.positions[0], claim.positions[1]) if claim.positions else None
    counts = claims_flips.flip_counts(found.records, _selector(claim), span)
    where = f" at positions {span[0]} to {span[1] - 1}" if span else ""
    flips, of = claim.flips or 0, claim.of or 1
    if not flips:
        return claims_flips.answer_none(claim.name, f"no top-1 flip{where} (0 in {of})", claim.source, margin,
                                        claims.confidence, counts, claims.power)
    band = claims_cost.RatioClaim(flips / of * (1 - margin), flips / of * (1 + margin), claims.confidence, False)
    return claims_flips.answer_count(claim.name, f"{flips} flips{where} in {of} requests: {flips / of:.3g} a "
                                     f"request +- {100 * margin:g} %", claim.source, band, counts, claims.power)


def answers(claims: ClaimsConfig, found: Cells) -> list[ClaimResult]:
    """Every claim answered on the cells found; a claim that names no cell of them is bad input."""
    problems = []
    for i, claim in enumerate(claims.claims):
        if claim.kind == "onset":  # its cells are its search's (claims_onset checks the arm against it)
            continue
        arms = {c["arm"] for c in found.cells} | {a["arm"] for a in found.arms}
        for key, value, values in (("arm", claim.arm, arms), ("baseline", claim.baseline, arms),
                                   ("phase", claim.phase, {c["phase"] for c in found.cells}),
                                   ("baseline_phase", claim.baseline_phase, {c["phase"] for c in found.cells}),
                                   ("prompt", claim.prompt, {c["prompt_id"] for c in found.cells})):
            if value is not None and value not in values:
                problems.append(line("unknown-name", f"claims[{i}].{key}", value, sorted(values),
                                     f"one of the {key}s of {', '.join(map(str, found.runs)) or 'the runs'}"))
        if claim.kind == "cost_ratio" and not problems:
            problems += _cost_problems(i, claim, found)
    if problems:
        raise ConfigError(problems)
    return [_answer(claim, claims, found) for claim in claims.claims]


def _cost_problems(i: int, claim: ClaimConfig, found: Cells) -> list[str]:
    """A cost claim's load point and metric, as the runs measured them."""
    points = found.load_points(claim.arm, claim.phase) + found.load_points(claim.baseline or "", claim.phase)
    if not points:
        loads = sorted({p["phase"] for run in found.costs for p in run})
        return [line("unknown-name", f"claims[{i}].phase", claim.phase, loads, "a load phase both arms ran "
                     "(a cost ratio is a load point's)")]
    metrics = sorted(set.intersection(*(set(p["per_window"]) for p in points)))
    return [] if claim.metric in metrics else [line("unknown-name", f"claims[{i}].metric", claim.metric, metrics,
                                                    "a metric of the load point")]


def _load_phase(typed: Config, claim: ClaimConfig) -> None:
    """A cost claim's arms and load phase, in the study."""
    loads = [name for name, kind in typed.protocol.phases.items() if kind.kind is PhaseKind.load]
    for key, value, names in (("arm", claim.arm, list(typed.arms)), ("baseline", claim.baseline, list(typed.arms)),
                              ("phase", claim.phase, loads)):
        if value not in names:
            raise ConfigError(line("unknown-name", f"claim '{claim.name}': {key}", value, sorted(names),
                                   f"a {'load phase' if key == 'phase' else 'arm'} of the study"))


def _phases(typed: Config, claim: ClaimConfig, arm: str | None, phase: str | None) -> list[str]:
    """The phases a side of a claim takes its cells from (every phase but load phases where it names none)."""
    for key, value, names in (("arm", arm, typed.arms), ("phase", phase, typed.protocol.phases),
                              ("prompt", claim.prompt, typed.prompts.prompts)):
        if value is not None and value not in names:
            raise ConfigError(line("unknown-name", f"claim '{claim.name}': {key}", value, sorted(names),
                                   f"a {key} of the study"))
    phases = [name for name, kind in typed.protocol.phases.items() if kind.kind is not PhaseKind.load
              and phase in (None, name)]
    if not phases:
        raise ConfigError(f"claim '{claim.name}': its phase is a load phase; claims size sequential and concurrent "
                          "phases (name one)")
    return phases


def sizing(typed: Config, claims: ClaimsConfig, results: list[ClaimResult]) -> list[str]:
    """The overrides that give each claim's phases the requests its n still lacks (beyond the run dirs'), spread
    over its cells (prompts x phases; an A/B claim: each side's): a sequential phase's repeats, a concurrent
    phase's batches (its batch size kept). A claim sized past max_n gets max_n. A phase that already sends as
    many keeps its config."""
    per_cell: dict[str, int] = {}
    windows: dict[str, int] = {}
    for claim, result in zip(claims.claims, results, strict=True):
        if claim.kind == "onset":  # the evidence is its search's: `orchestrator onset` runs more
            continue
        if claim.kind == "cost_ratio":
            _load_phase(typed, claim)
            if result.n_needed is not None:  # more windows a side than the run dirs hold (None: cannot size)
                held = min(result.k, result.n)
                windows[claim.phase or ""] = max(windows.get(claim.phase or "", 0), result.n_needed - held)
            continue
        if result.scale == "count" and result.n_needed is None:  # no pilot to size a mean from: the study's n
            _phases(typed, claim, claim.arm, claim.phase)  # its cells, checked all the same
            continue
        wanted = min(result.n_needed or claims.max_n, claims.max_n)
        sides = [(_phases(typed, claim, claim.arm, claim.phase), result.n)]
        if claim.kind == "ab_difference":
            sides.append((_phases(typed, claim, claim.baseline or claim.arm, claim.baseline_phase or claim.phase),
                          result.baseline_n or 0))
        prompts = 1 if claim.prompt is not None else max(1, len(typed.prompts.prompts))
        for phases, held in sides:
            for name in phases:
                per_cell[name] = max(per_cell.get(name, 0), math.ceil((wanted - held) / (prompts * len(phases))))
    overrides = []
    for name, more in windows.items():
        load = typed.protocol.phases[name].load
        cap = max(1, claims.max_n // (load.requests or 1))  # max_n: the most requests a claim's cells are given
        if min(more, cap) > load.windows:
            overrides.append(f"protocol.phases.{name}.load.windows={min(more, cap)}")
    for name, n in per_cell.items():
        phase = typed.protocol.phases[name]
        if n <= cell_requests(phase):  # the study already sends as many
            continue
        overrides.append(f"protocol.phases.{name}.repeats={n}" if phase.kind is PhaseKind.sequential
                         else f"protocol.phases.{name}.batches={math.ceil(n / phase.repeats)}")
    return overrides


def _free(out: Path) -> Path:
    number = 1
    while (out / f"run-{number}").exists():
        number += 1
    return out / f"run-{number}"


def check_claims(file: Path, study: str | None, line_: CommandLine, run_dirs: list[Path], out: Path | None
                 ) -> Outcome:
    """The claims answered (after a run sized for what the run dirs lack, where a study is named), the page
    written; exit 3 when one is contradicted, the run's own status where it failed."""
    from orchestrator.report.claims import write

    claims = load(file)
    study = study or (claims.study if not run_dirs else None)
    if all(claim.kind == "onset" for claim in claims.claims):  # their evidence is their searches': nothing to run
        study = None
    if study is None and not run_dirs and any(claim.kind != "onset" for claim in claims.claims):
        raise ConfigError(f"{file}: name the evidence: --study NAME (runs what is missing) and/or --run RUN_DIR...")
    if line_.overrides and study is None:
        raise ConfigError(f"overrides ({' '.join(line_.overrides)}) are for a study run here: add --study NAME")
    out = out or Path("claims") / file.stem
    found = Cells.read(run_dirs) if run_dirs else Cells([], [], [])
    ran = Outcome()
    if study is not None:
        ran, found = _run_missing(claims, study, line_, found, out)
        if ran.status not in (ExitStatus.OK, ExitStatus.GATE_FAILED):  # the measurement failed: its lines say why
            return ran
    results = answers(claims, found)
    pages = write(results, claims, found.runs, out, [f"{run.paths.root}: {run.meta.provenance}"
                                                     for run in found.records if run.meta.provenance])
    contradicted = [r for r in results if r.verdict == rates.CONTRADICTED]
    return ran + answer(*pages.summary, f"\nClaims: {pages.markdown}, {pages.html.name}, {pages.json.name}",
                        status=ExitStatus.GATE_FAILED if contradicted else ExitStatus.OK)


def _run_missing(claims: ClaimsConfig, study: str, line_: CommandLine, found: Cells, out: Path
                 ) -> tuple[Outcome, Cells]:
    """The study run, as `run` runs it, with what the cells found lack; nothing run where they lack nothing."""
    from orchestrator import config
    from orchestrator.sweep.app import run_with_hydra

    overrides = [f"study={study}", *line_.overrides]
    typed = config.to_typed(config.compose(overrides, line_.dirs))
    so_far = [_answer(claim, claims, found) for claim in claims.claims]  # what each lacks (all of it: no runs)
    sized = sizing(typed, claims, so_far)
    if not sized and found.runs:
        return note("the run dirs hold the n each claim needs: nothing run"), found
    run_dir = _free(out)
    dirs = [arg for d in line_.dirs for arg in ("--config-dir", str(d))]
    ran = run_with_hydra(CommandLine.parse([*dirs, *overrides, *sized, f"hydra.run.dir={run_dir}"]))
    if ran.status not in (ExitStatus.OK, ExitStatus.GATE_FAILED):
        return ran, found
    return note(f"ran {run_dir}" + (f" with {' '.join(sized)}" if sized else "")), Cells.read([*found.runs, run_dir])
