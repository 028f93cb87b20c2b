"""How often the over-saturation stop (analysis/saturation.py) calls a load point over-saturated, on planted
queues whose capacity is known: one slot, a fixed service time, Poisson arrivals at a fraction of the capacity,
each request's first token a quarter into its service. A point below the capacity that is called over-saturated
stops a series too early (its bound would exclude the capacity); one above it that is missed widens the bound
(the next point stops it).

    .venv/bin/python bench/saturation_stop.py                     # 500 draws a fraction, 2 windows of 20 and 40

Pure computation, no server: seconds.
"""

from __future__ import annotations

import argparse
import random

import numpy as np

from orchestrator.analysis.saturation import Window, verdict

SERVICE_S = 0.1
FRACTIONS = (0.5, 0.8, 0.9, 1.1, 1.25, 1.5, 1.68, 2.0, 2.83)


def queue(rate_per_s: float | None, n: int, seed: int, service_s: float = SERVICE_S) -> Window:
    """A FIFO server of one slot and a fixed service time, fed Poisson arrivals (None: a closed loop of one);
    the first token comes a quarter into the service."""
    rng, now, free = random.Random(seed), 0.0, 0.0
    scheduled, waited, answered = [], [], []
    for i in range(n):
        if rate_per_s is None:
            now = free
        elif i:
            now += rng.expovariate(rate_per_s)
        start = max(now, free)
        free = start + service_s
        scheduled.append(now)
        waited.append(start + service_s / 4 - now)
        answered.append(free)
    return Window(np.array(scheduled), np.array(waited), np.array(answered))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--tolerance", type=float, default=0.1)
    args = parser.parse_args()
    print(f"planted queue: one slot, {SERVICE_S * 1000:g} ms a request (capacity {1 / SERVICE_S:g}/s), Poisson "
          f"arrivals; tolerance {args.tolerance}; {args.draws} draws a cell; share called over-saturated")
    print("windows x requests | " + " | ".join(f"{f:g} x capacity" for f in FRACTIONS))
    for windows, requests in ((2, 20), (2, 30), (2, 40), (3, 40)):
        called = []
        for fraction in FRACTIONS:
            rate = fraction / SERVICE_S
            over = sum(verdict([queue(rate, requests, 1000 * draw + w) for w in range(windows)], args.tolerance,
                               rate).over_saturated for draw in range(args.draws))
            called.append(f"{100 * over / args.draws:.1f} %")
        print(f"{windows} x {requests} | " + " | ".join(called))


if __name__ == "__main__":
    main()
