"""The digests a user's probe script printed, and whether its repeats printed the same ones
(`orchestrator probe --script`; docs/probes.md "Your own script").

A digest line is what a hash loop prints: a name, then a hex digest of at least 16 digits as the line's last
word, e.g. `DIGEST logits 3fa1...`, `logits: 3fa1...`, `logits sha256=3fa1...`, `layer.3.out = 3fa1...`. The name
is the rest of the line (a leading `DIGEST` and a trailing `:`/`=`/`sha256=`-style label dropped; a line that is a
bare digest is named `digest`); a name printed
again in the same run is numbered (`out`, `out#2`, ...), so a loop that prints the same label each step is
compared step by step. Every other line is kept in the raw stdout only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.stats import divergence_bound

_LABEL = r"(?:(?:sha\d+|md5|blake2[bs]?|xxh\w*|hash|digest)\s*[:=]\s*)?"
_NAME = r"(?:(?P<name>\S.*?)(?:\s*[:=]\s*|\s+))?"
DIGEST_LINE = re.compile(rf"^\s*(?:DIGEST\s+)?{_NAME}{_LABEL}(?P<hex>[0-9a-fA-F]{{16,128}})\s*$")
UNNAMED = "digest"  # the name of a line that is a bare hex digest


def read_digests(stdout: str) -> list[tuple[str, str]]:
    """(name, lower-case hex) for every digest line of one run's stdout, in order."""
    seen: dict[str, int] = {}
    found = []
    for line in stdout.splitlines():
        match = DIGEST_LINE.match(line)
        if match is None:
            continue
        name = (match["name"] or UNNAMED).rstrip(":= ")
        seen[name] = seen.get(name, 0) + 1
        found.append((name if seen[name] == 1 else f"{name}#{seen[name]}", match["hex"].lower()))
    return found


@dataclass(frozen=True)
class Agreement:
    """One digest name across the repeats: in how many it was printed, its distinct values, how many repeats
    differ from the first repeat's value (absent counts as different), and the 95% bounds on that rate."""

    name: str
    repeats: int
    printed_in: int
    distinct: int
    divergent: int
    lower_95: float
    upper_95: float

    @property
    def identical(self) -> bool:
        return self.printed_in == self.repeats and self.distinct == 1


def agreements(rows: Sequence[Mapping[str, Any]]) -> list[Agreement]:
    """Per digest name, over the runs (rows of the scripts table) in repeat order."""
    runs = sorted(rows, key=lambda r: int(r["repeat"]))
    values = [dict(zip(r.get("digest_names") or [], r.get("digest_values") or [], strict=True)) for r in runs]
    names = list(dict.fromkeys(n for run in values for n in run))
    out = []
    for name in names:
        printed = [run.get(name) for run in values]
        first = printed[0]
        divergent = sum(v != first for v in printed[1:])
        lower, upper = divergence_bound(divergent, max(len(printed) - 1, 1))
        out.append(Agreement(name, len(printed), sum(v is not None for v in printed),
                             len({v for v in printed if v is not None}), divergent, lower, upper))
    return out
