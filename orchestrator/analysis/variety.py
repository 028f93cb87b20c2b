"""Whether a load point's workload is one (docs/load.md, "A workload that is one"), from the record: per arm and
load phase, the fewest distinct prompts of a window (probes and background: a request that reuses a prefix is a
prompt of its own), the requests in flight on average (Little's law over each window's span: the sum of its
completed requests' latencies over first send to last answer, the windows' mean), and the share of requests whose
prompt's start was sent before in the window (`prefix_seen`). Fewer distinct prompts than requests in flight: a
prefix cache serves the traffic from prompts it has seen, and the cost is that of a workload nobody runs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.analysis.cost_results import PhaseWorkload
from orchestrator.errors import FEW_PROMPTS


def workload(arm: str, phase: str, rows: dict[str, Any]) -> PhaseWorkload:
    """`rows`: analysis/cost.py load_groups' columns of the arm's phase."""
    send, recv, ok, window_of = rows["send_ns"], rows["recv_ns"], rows["ok"], rows["batch_id"]
    distinct, flights = [], []
    for window in np.unique(window_of[~np.isnan(window_of)]):
        at = window_of == window
        distinct.append(len({p for p, mine in zip(rows["prompt_id"], at, strict=True) if mine}))
        done = at & ok
        span_ns = np.nanmax(recv[done]) - np.nanmin(send[at]) if done.any() else math.nan
        if span_ns > 0:
            flights.append(float(np.sum(recv[done] - send[done]) / span_ns))
    seen = [s for s in rows["prefix_seen"] if s is not None]
    in_flight = float(np.mean(flights)) if flights else None
    fewest = min(distinct, default=0)
    warning = None if in_flight is None or fewest >= in_flight else (
        f"{fewest} distinct prompts for {in_flight:.1f} requests in flight: {FEW_PROMPTS} (load.background: "
        "synthetic, the default, is a varied set)")
    return PhaseWorkload(arm, phase, fewest, in_flight, sum(seen) / len(seen) if seen else None, warning)
