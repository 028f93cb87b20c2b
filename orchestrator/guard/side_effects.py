"""The side-effect audit: what else an A/B changed. Two arms of one run dir declared to differ in some leaves
(study.variables) are compared on everything the guard sees: their config leaves (each flag named with the neutral
setting its engine's profile maps it to), every fingerprint field (image, packages, env, GPU, the startup log's facts,
what the server says), the held facts, the knob listings, and the memory peaks of every start. What moved is split in
two: what the declaration accounts for (the declared leaves, and the fields `study.implications` lists for them), and
everything else, "what else it changed". A deterministic mode that also widens the batch window is the case it is
for: the window moves though only the mode was declared. Read from the record alone (the arms table, guard.json,
.hydra/config.yaml); docs/guard.md, "What else it changed".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.catalog import line
from orchestrator.engines import profile_for
from orchestrator.errors import ConfigError, RecordError
from orchestrator.guard import held
from orchestrator.guard.leaves import arm_leaves, differences, matches, positive, positive_keys, show
from orchestrator.guard.observed import observed_fields
from orchestrator.guard.observed import read as read_guard
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import ArmStart, RecordedRun, read_run

CONFIG, OBSERVED, HELD, KNOBS, MEMORY = "config", "observed", "held fact", "knobs", "memory"
# A peak moved when every start of one arm is above (or below) every start of the other by more than this share:
# two starts of one engine differ by a few percent (allocator, threads); a workspace or a cache switched on does more
MEMORY_SHARE = 0.2
PEAKS = ("peak_memory_bytes", "peak_gpu_memory_bytes")  # the arms table's columns (run/arm/resources.py)


@dataclass(frozen=True)
class Moved:
    """One thing that differs between the two arms: arm A's value and arm B's, "<absent>" where one lacks it."""

    kind: str  # CONFIG, OBSERVED, HELD, KNOBS or MEMORY
    name: str  # engine_args.max-num-seqs, log_facts.batch_window_ms, packages.torch, peak_memory_bytes
    a: Any
    b: Any
    setting: str | None = None  # a flag's neutral setting in its engine's profile (max_batch), where it maps it
    allowed_by: str | None = None  # the declared leaf whose implication lets every field move ("image": "*")

    def text(self) -> str:
        """'log_facts.batch_window_ms (20 -> 50)'"""
        named = f"{self.name} [{self.setting}]" if self.setting else self.name
        return f"{named} ({show(self.a)} -> {show(self.b)})"


@dataclass
class SideEffects:
    """The audit of one A/B. `moved`: what else it changed, besides what `declared` accounts for (`explained`);
    `unknown`: what could not be compared (a fingerprint not taken, a held fact a log does not state)."""

    arm_a: str
    arm_b: str
    declared: list[str]  # the two arms' study.variables; [] where neither declares any
    moved: list[Moved] = field(default_factory=list)
    explained: list[Moved] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """What else it changed, by name: ['log_facts.batch_window_ms']."""
        return [m.name for m in self.moved]

    def sentence(self) -> str:
        """One line: what else the A/B changed, or that nothing else moved, and what was not seen."""
        what = ", ".join(self.declared) or "nothing declared"
        said = (f"{self.arm_b} against {self.arm_a} ({what}) also changed " + "; ".join(m.text() for m in self.moved)
                if self.moved else f"{self.arm_b} against {self.arm_a} ({what}) changed nothing else the guard sees")
        return said + (f" (not compared: {'; '.join(self.unknown)})" if self.unknown else "")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "names": self.names}


@dataclass(frozen=True)
class StudyRules:
    """What the audit reads of the study a run dir recorded (.hydra/config.yaml's `study`)."""

    variables: dict[str, list[str]]
    implications: dict[str, list[str]]
    held_facts: list[str]
    ignore_fields: list[str]
    ignore_leaves: list[str]

    @classmethod
    def of(cls, paths: RunPaths) -> StudyRules:
        from omegaconf import OmegaConf

        saved = paths.hydra / "config.yaml"
        if not saved.is_file():
            raise RecordError(f"{paths.root} has no .hydra/config.yaml, which says what its arms declare: pass a run "
                              "dir that `orchestrator run` wrote")
        try:
            whole = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
        except Exception as exc:  # YAML's and OmegaConf's errors: a damaged file either way
            raise RecordError(f"{saved} cannot be read ({' '.join(str(exc).split())}): copy the run dir "
                              "again") from None
        study = whole.get("study") if isinstance(whole, dict) else None
        study = study if isinstance(study, dict) else {}
        return cls(variables=dict(study.get("variables") or {}), implications=dict(study.get("implications") or {}),
                   held_facts=list(study.get("held_facts") or []), ignore_fields=list(study.get("ignore_fields") or []),
                   ignore_leaves=list(study.get("ignore_leaves") or []))


def side_effects(run: RecordedRun | RunPaths | Path | str, arm_a: str, arm_b: str) -> SideEffects:
    """What else arm B changed against arm A, in a run dir (its path, or as `record.recorded.read_run` read it):
    the A/B's declared leaves are the two arms' study.variables (the baseline declares none: the other arm's).
    Raises ConfigError naming the arms the run has when one of the two is not among them, RecordError when the
    run dir has no .hydra/config.yaml.

    For a caller (triage's switch steps): `audit = side_effects(run_dir, "off", "on")`; `audit.names` lists what
    else moved (['log_facts.batch_window_ms']; [] for a clean switch), `audit.moved` the same typed (kind, name,
    each arm's value), `audit.sentence()` says it in one line, `audit.to_json()` is report.json's entry."""
    recorded = run if isinstance(run, RecordedRun) else read_run(run if isinstance(run, RunPaths)
                                                                 else RunPaths(Path(run)))
    rules = StudyRules.of(recorded.paths)
    names = list(dict.fromkeys(s.arm for s in recorded.starts))
    for option, arm in (("arm_a", arm_a), ("arm_b", arm_b)):
        if arm not in names:
            raise ConfigError(line("unknown-name", option, arm, names))
    starts = {arm: [s for s in recorded.starts if s.arm == arm] for arm in (arm_a, arm_b)}
    first_a, first_b = (min(starts[arm], key=lambda s: s.start) for arm in (arm_a, arm_b))
    # against the baseline, the other arm's declaration; between two arms that each declare theirs, both
    declared = list(dict.fromkeys([*(rules.variables.get(arm_a) or []), *(rules.variables.get(arm_b) or [])]))
    audit = SideEffects(arm_a, arm_b, declared)
    engine = first_b.engine or first_a.engine
    leaves = [positive(leaf, engine) for leaf in declared]
    _config(audit, rules, first_a, first_b, leaves)
    _observed(audit, rules, first_a, first_b, leaves, positive_keys(rules.implications, engine))
    _knobs(audit, recorded, arm_a, arm_b)
    _memory(audit, starts[arm_a], starts[arm_b])
    return audit


def _config(audit: SideEffects, rules: StudyRules, a: ArmStart, b: ArmStart, leaves: list[str]) -> None:
    """Config leaves, a flag named with its neutral setting where the engine's profile maps it."""
    by_flag = {f"engine_args.{flag}": neutral for neutral, flag in profile_for(b.engine or a.engine).settings.items()}
    for leaf, (left, right) in differences(arm_leaves(a.config, rules.ignore_leaves),
                                           arm_leaves(b.config, rules.ignore_leaves)).items():
        moved = Moved(CONFIG, leaf, left, right, setting=by_flag.get(leaf))
        (audit.explained if any(matches(leaf, d) for d in leaves) else audit.moved).append(moved)


def _observed(audit: SideEffects, rules: StudyRules, a: ArmStart, b: ArmStart, leaves: list[str],
              implications: Mapping[str, list[str]]) -> None:
    """Fingerprint fields, then the held facts (which must be equal whatever is declared)."""
    fp_a, fp_b = a.fingerprint, b.fingerprint
    if fp_a is None or fp_b is None:
        missing = [s.arm for s in (a, b) if s.fingerprint is None]
        audit.unknown.append(f"fingerprint of {', '.join(missing)} (the arm failed before it was taken)")
        return
    for arm, fp in ((a.arm, fp_a), (b.arm, fp_b)):
        if (fp.get("probe") or {}).get("error"):
            audit.unknown.append(f"environment probe in {arm}: {fp['probe']['error']}")
    fields_a, fields_b = ({k: v for k, v in observed_fields(fp, s.image_id).items()
                           if not any(matches(k, p) for p in rules.ignore_fields)} for s, fp in ((a, fp_a), (b, fp_b)))
    for name, (left, right) in differences(fields_a, fields_b).items():
        if held.is_held(name, rules.held_facts):
            continue
        explained_by, allowed_by = _implied_by(name, leaves, implications)
        (audit.explained if explained_by else audit.moved).append(Moved(OBSERVED, name, left, right,
                                                                        allowed_by=allowed_by))
    differing, not_observed = held.check(rules.held_facts, {a.arm: fp_a.get("log_facts") or {},
                                                            b.arm: fp_b.get("log_facts") or {}})
    audit.moved += [Moved(HELD, name, left, right) for name, (left, right) in differing.items()]
    audit.unknown += not_observed


def _implied_by(name: str, leaves: Sequence[str], implications: Mapping[str, list[str]]) -> tuple[str | None,
                                                                                                str | None]:
    """(the declared leaf that accounts for a field: the leaf itself, or one `study.implications` lists it for by
    name or prefix; the declared leaf whose '*' entry lets it move, where only such an entry does: an image, inside
    which everything may differ, and the audit still says what did). (None, None): nothing declared covers it."""
    wildcard = None
    for leaf in leaves:
        if matches(name, leaf):
            return leaf, None
        for key, fields in implications.items():
            if not (matches(leaf, key) or matches(key, leaf)):
                continue
            if any(f != "*" and matches(name, f) for f in fields):
                return leaf, None
            if "*" in fields:
                wildcard = wildcard or leaf
    return None, wildcard


def _knobs(audit: SideEffects, run: RecordedRun, arm_a: str, arm_b: str) -> None:
    """What the knob listings say is installed where each arm runs (guard.json), where both were listed."""
    guard = read_guard(run.paths)
    listed = [guard.knobs.get(arm) if guard else None for arm in (arm_a, arm_b)]
    ka, kb = listed
    if ka is None or kb is None or not (ka.checked and kb.checked):
        return
    for name, (left, right) in differences({"listed_from": ka.listed_from, **{f"versions.{k}": v for k, v in
                                                                             (ka.versions or {}).items()}},
                                           {"listed_from": kb.listed_from, **{f"versions.{k}": v for k, v in
                                                                             (kb.versions or {}).items()}}).items():
        audit.moved.append(Moved(KNOBS, f"knobs.{name}", left, right))


def _memory(audit: SideEffects, starts_a: list[ArmStart], starts_b: list[ArmStart]) -> None:
    """Each peak (memory, GPU memory) over every start of each arm: moved when the two arms' ranges are apart by
    more than MEMORY_SHARE of arm A's."""
    for column in PEAKS:
        peaks_a = [p for p in (getattr(s, column) for s in starts_a) if p is not None]
        peaks_b = [p for p in (getattr(s, column) for s in starts_b) if p is not None]
        if not peaks_a or not peaks_b:
            continue
        low_a, high_a, low_b, high_b = min(peaks_a), max(peaks_a), min(peaks_b), max(peaks_b)
        if low_b > high_a * (1 + MEMORY_SHARE) or high_b < low_a * (1 - MEMORY_SHARE):
            audit.moved.append(Moved(MEMORY, column, _peaks(peaks_a), _peaks(peaks_b)))


def _peaks(values: list[int]) -> str:
    """'412 MiB' for one start, '400-412 MiB (3 starts)' for several."""
    low, high = min(values) / 2**20, max(values) / 2**20
    return f"{high:.0f} MiB" if len(values) == 1 else f"{low:.0f}-{high:.0f} MiB ({len(values)} starts)"

