"""Known issues by version: each arm's engine profile lists defects of its stack with the versions they affect
(engines/known_issues.py); here they are judged against what the arm's versions are. `check` reads them from
the knob listing (the engine and the packages it names, in the arm's image), a run from its record (the
fingerprint's environment probe, the server's /version). One line each: the defect, the version, its fix and
source; an arm whose version was not recorded is said so ("not checked"), never passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from orchestrator.engines import profile_for
from orchestrator.engines.known_issues import KnownIssue
from orchestrator.guard.results import KnobCheck, KnownIssueNote

if TYPE_CHECKING:
    from orchestrator.config.schema import ArmConfig, Config


@dataclass(frozen=True)
class Versions:
    """What is known of an arm's versions: distribution -> version (None: looked for, not installed);
    `complete`: every package was looked for, so one absent is not installed (else it is not recorded)."""

    packages: Mapping[str, str | None]
    complete: bool


def affects(issue: KnownIssue, version: str) -> bool:
    """Whether `version` lies in the issue's range, by PEP 440 (pre-releases count: 0.6.18rc1 < 0.6.18rc2 <
    0.6.18). Raises InvalidVersion for a version PEP 440 cannot read."""
    return Version(version) in SpecifierSet(issue.affected, prereleases=True)


def notes(arm: str, issues: Iterable[KnownIssue], known: Versions | None, env: Iterable[str]) -> list[KnownIssueNote]:
    """The arm's notes: each issue that concerns it (an env issue only where the arm sets that variable) whose
    package's version is in range, or is not known."""
    env_names = set(env)
    found = []
    for issue in issues:
        if issue.env is not None and issue.env not in env_names:
            continue
        version = None if known is None else known.packages.get(issue.package)
        if version is None:
            if known is None or (issue.package not in known.packages and not known.complete):
                found.append(KnownIssueNote(arm, issue.name, issue.package, None, None,
                                            f"arm '{arm}': {issue.name}: {issue.package} version not recorded: "
                                            "not checked"))
            continue  # looked for and not installed: not affected
        try:
            hit = affects(issue, version)
        except InvalidVersion:
            found.append(KnownIssueNote(arm, issue.name, issue.package, version, None,
                                        f"arm '{arm}': {issue.name}: {issue.package} version '{version}' is no "
                                        "PEP 440 version: not checked"))
            continue
        if hit:
            found.append(KnownIssueNote(arm, issue.name, issue.package, version, True,
                                        f"arm '{arm}': {issue.name} at {issue.package} {version}: {issue.effect} "
                                        f"({issue.fix}; source: {issue.source})"))
    return found


def _set_env(arm: ArmConfig) -> list[str]:
    return [*arm.env, *arm.secret_env]


def listed(knobs: KnobCheck | None) -> Versions | None:
    """The versions the knob listing gave (None: it did not run, or named none); a package it does not name
    is not recorded."""
    if knobs is None or not knobs.versions:
        return None
    return Versions(knobs.versions, complete=False)


def recorded(fingerprint: Mapping[str, Any] | None, engine_packages: tuple[str, ...]) -> Versions | None:
    """The versions an arm's record keeps: the environment probe's packages (every one it looks for: one
    absent is not installed), else only the server's own version (/version, or its startup banner) as its
    engine's first package."""
    if not fingerprint:
        return None
    probe = fingerprint.get("probe") or {}
    packages: dict[str, str | None] = dict(probe.get("packages") or {}) if not probe.get("error") else {}
    server = fingerprint.get("version")
    version = (server.get("version") if isinstance(server, Mapping) else None) \
        or (fingerprint.get("log_facts") or {}).get("engine_version")
    if engine_packages and version and engine_packages[0] not in packages:
        packages[engine_packages[0]] = str(version)
    if not packages:
        return None
    return Versions(packages, complete=not probe.get("error") and bool(probe.get("packages")))


def check_notes(config: Config, knobs: Mapping[str, KnobCheck]) -> list[KnownIssueNote]:
    """What `check` warns of, before anything starts: each arm against its knob listing's versions."""
    return [note for name, arm in config.arms.items() for note in notes(
        name, profile_for(arm.engine).known_issues, listed(knobs.get(name)), _set_env(arm))]


def run_notes(config: Config, fingerprints: Mapping[str, Mapping[str, Any] | None]) -> list[KnownIssueNote]:
    """What the report says of a run: each arm against its recorded versions, with the env its probe saw in
    it besides the env its config sets (an image's own ENV lines count)."""
    found = []
    for name, arm in config.arms.items():
        profile = profile_for(arm.engine)
        fingerprint = fingerprints.get(name)
        seen = ((fingerprint or {}).get("probe") or {}).get("env") or {}
        found += notes(name, profile.known_issues, recorded(fingerprint, profile.packages), [*_set_env(arm), *seen])
    return found
