"""What the guard returns: typed results, kept in RUN/guard.json and rendered by report/guard.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ABSENT = "<absent>"
SINGLE, CONFOUNDED, UNKNOWN, UNDECLARED = "single-variable", "confounded", "unknown", "not declared"


@dataclass
class PairDifference:
    """Baseline vs one arm: every differing leaf (or fingerprint field) and which of them the arm's
    declared variables do not explain."""

    arm: str
    declared: list[str] | None  # None: the study declares no variables for this arm
    differing: dict[str, list[Any]]  # leaf -> [baseline value, arm value]
    extra: list[str]  # differing, not explained by a declared variable
    verdict: str  # SINGLE | CONFOUNDED | UNKNOWN | UNDECLARED


@dataclass
class DeclaredPair(PairDifference):
    """Config leaves."""

    unused: list[str] = field(default_factory=list)  # declared, yet equal in both arms
    # declared, and different as configured, but made equal by the stand-in (stand_in=IMAGE replaces the image,
    # build, GPUs and mounts of every arm): what such an arm's A/B compares is the stand-in with itself
    stand_in_equal: list[str] = field(default_factory=list)
    # one sentence per differing flag that moves several variables at once (--enforce-eager: CUDA graphs and
    # torch.compile), guard/coupled.py: one leaf in config, not one variable
    coupled: list[str] = field(default_factory=list)


@dataclass
class ObservedPair(PairDifference):
    """Fingerprint fields."""

    unknown: list[str] = field(default_factory=list)  # fields that could not be read in both arms


@dataclass
class SharedCache:
    """A scratch dir several arms share; flagged when they differ in a cache leaf."""

    dir: str
    arms: list[str]
    differing: dict[str, dict[str, Any]]  # leaf -> arm -> value
    flagged: bool


@dataclass
class DeclaredCheck:
    checked: bool  # the study declares variables
    baseline: str
    allow_confounded: bool
    pairs: list[DeclaredPair]
    not_in_study: list[str]  # arms study.variables names that the study does not have
    shared_caches: list[SharedCache]
    stand_in: str | None = None

    def stand_in_sentences(self) -> list[str]:
        """Each A/B whose declared variable the stand-in replaces in every arm: said, as it measures nothing."""
        return [f"stand_in={self.stand_in} runs every arm on one image: arm '{p.arm}' and baseline "
                f"'{self.baseline}' no longer differ in {', '.join(p.stand_in_equal)}"
                + (", so their A/B compares the stand-in with itself (an A/A)"
                   if set(p.stand_in_equal) == set(p.declared or []) else "")
                for p in self.pairs if p.stand_in_equal]

    def coupled_sentences(self) -> list[str]:
        """Each pair's flags that move several variables at once, said (guard/coupled.py)."""
        return [said for p in self.pairs for said in p.coupled]

    @property
    def confounded(self) -> bool:
        return any(p.verdict == CONFOUNDED for p in self.pairs)


@dataclass
class ObservedCheck:
    baseline: str
    pairs: list[ObservedPair]


@dataclass
class KnobCheck:
    """An arm's flags and env names against what the engine in its image lists."""

    checked: bool
    unknown: list[str] = field(default_factory=list)  # one problem per unknown name
    reason: str | None = None  # why it was not checked
    flags_known: int | None = None
    env_known: int | None = None
    listed_from: str | None = None  # the engine and version the listing came from, when it says
    # the listing could not import the engine itself: where the arm runs, its engine is not installed
    engine_missing: str | None = None
    # one problem per flag whose value the engine's parser would refuse (its listing gives the type or choices)
    bad_values: list[str] = field(default_factory=list)
    # the arm runs a script of its own under an engine's profile, which the engine's requests may not suit
    own_server: bool = False
    # what the listing says is installed: the engine's version and the packages it names, a package's None
    # looked for and not installed (guard/versions.py); None: it names none
    versions: dict[str, str | None] | None = None


@dataclass
class KnownIssueNote:
    """An arm's recorded version of a package inside a known defect's range (engines/known_issues.py), or
    the version not recorded, so the defect is not checked (guard/versions.py)."""

    arm: str
    issue: str  # the defect's name in its engine profile's table
    package: str
    version: str | None  # None: not recorded
    affected: bool | None  # None: not checked
    line: str  # as `check` warns and the report says it


@dataclass
class GuardResult:
    declared: DeclaredCheck | None = None
    observed: ObservedCheck | None = None
    knobs: dict[str, KnobCheck] = field(default_factory=dict)
    known_issues: list[KnownIssueNote] = field(default_factory=list)  # every arm's, in arm order

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.declared is not None:
            out["declared"]["confounded"] = self.declared.confounded
        out["knobs"] = {arm: {k: v for k, v in check.items() if v is not None} for arm, check in out["knobs"].items()}
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> GuardResult:
        declared = doc.get("declared")
        observed = doc.get("observed")
        return cls(
            declared=None if declared is None else DeclaredCheck(
                checked=declared["checked"], baseline=declared["baseline"],
                allow_confounded=declared["allow_confounded"],
                pairs=[DeclaredPair(**p) for p in declared["pairs"]], not_in_study=declared["not_in_study"],
                shared_caches=[SharedCache(**c) for c in declared["shared_caches"]],
                stand_in=declared.get("stand_in")),
            observed=None if observed is None else ObservedCheck(
                baseline=observed["baseline"], pairs=[ObservedPair(**p) for p in observed["pairs"]]),
            knobs={arm: KnobCheck(**k) for arm, k in (doc.get("knobs") or {}).items()},
            known_issues=[KnownIssueNote(**note) for note in doc.get("known_issues") or []])
