"""Known defects of an engine's stack by version: the data of one row of an engine profile's `known_issues`
table (the vLLM profile's table: engines/vllm_issues.py). Which arm a row concerns is judged by the guard
against the versions the arm's record keeps (guard/versions.py, with PEP 440 comparisons); here is only what
each defect is, which versions it affects and where that is stated. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownIssue:
    """One defect: the distribution whose version decides it (`package`, as the fingerprint's packages name
    it: vllm, flashinfer, ...), the versions it affects (`affected`, a PEP 440 specifier set, pre-releases
    included: "<0.6.18rc2"), what it does, its fix (a version, a reference, or what to do) and its source
    (a sentence of the seed, or an upstream reference). With `env`, it concerns only an arm that sets that
    env var: the defect is that the variable does nothing at the affected versions."""

    name: str  # how a line names it: "FlashInfer autotune-key collision", "env VLLM_X has no effect"
    package: str
    affected: str
    effect: str
    fix: str
    source: str
    env: str | None = None


def absent_env(env: str, package: str, affected: str, fix: str, source: str) -> KnownIssue:
    """An env var the engine does not read at the affected versions: set there, it changes nothing."""
    return KnownIssue(f"env {env} has no effect", package, affected,
                      "the engine reads no such variable at these versions, so the arm runs as without it",
                      fix, source, env=env)
