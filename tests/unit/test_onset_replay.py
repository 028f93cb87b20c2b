"""bench/onset_replay.py on the committed H100 onset.json: the picks docs/gpu-validation.md quotes are what
today's model gives, and what the committed output (docs/probe-results/h100-load/onset_replay.txt) says."""

from __future__ import annotations

import json
from pathlib import Path

from tests import benches

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "probe-results" / "h100-load"


def test_the_replayed_picks_are_the_committed_ones() -> None:
    bench = benches.load("onset_replay")
    lines = bench.replay(json.loads((DATA / "onset_continuous_batching.json").read_text()), 3, [2, 5])
    assert lines[-2:] == ["  after 2 result(s) (n = 93 a job): next 8, 23, 3",
                          "  after 5 result(s) (n = 68 a job): next 4, 8, 2"]
    committed = (DATA / "onset_replay.txt").read_text().splitlines()
    assert all(line in committed for line in lines[1:]), lines
