"""Replay an onset search's choices from its onset.json with today's model (analysis/onset.py through
sweep/onset.py's priors and grid): after the first j results of each configuration, in the order the jobs ran,
the points the search would pick next. What backs docs/gpu-validation.md's "on these five results the search
now picks ..." (its output: docs/probe-results/h100-load/onset_replay.txt).

    python bench/onset_replay.py docs/probe-results/h100-load/onset_continuous_batching.json --count 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.analysis import onset as model
from orchestrator.sweep.onset import priors_of
from orchestrator.sweep.onset_config import grid, settings, value_text


def replay(raw: dict[str, Any], count: int, prefixes: list[int] | None = None) -> list[str]:
    """The lines printed: the axis, then per configuration its jobs in order and, after each prefix of its results
    (all of them, or those in `prefixes`), the `count` points picked next."""
    s = settings(raw["settings"])
    points = grid(s.axis)  # today's grid for the recorded axis (the recorded one may predate a change)
    out = [f"axis {s.axis.key} {s.axis.low:g}-{s.axis.high:g} {s.axis.scale}, {len(points)} grid points, priors "
           f"below {s.prior_below} above {s.prior_above}"]
    for c in raw["configurations"]:
        jobs = sorted(c["jobs"], key=lambda j: j["job"])
        out.append(f"configuration {' '.join(c['per']) or '(none)'}: jobs in order "
                   + ", ".join(f"{value_text(s.axis, j['value'])} ({j['k']}/{j['n']})" for j in jobs))
        for done in prefixes or range(1, len(jobs) + 1):
            obs = [model.Observation(points.index(float(j["value"])), j["k"], j["n"]) for j in jobs[:done]
                   if j["k"] is not None and j["n"]]
            n = int(np.median([o.n for o in obs]))
            picks = model.choose_points(len(points), obs, priors_of(s, points), n, count)
            out.append(f"  after {done} result(s) (n = {n} a job): next "
                       + ", ".join(value_text(s.axis, points[i]) for i in picks))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("onset_json", type=Path)
    parser.add_argument("--count", type=int, default=3, help="points picked after each prefix of results")
    args = parser.parse_args()
    lines = replay(json.loads(args.onset_json.read_text()), args.count)
    print(f"{args.onset_json}: {lines[0]}")
    print("\n".join(lines[1:]))


if __name__ == "__main__":
    main()
