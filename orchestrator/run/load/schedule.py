"""A load point's schedule, with no I/O (docs/load.md): when each request of a window is meant to leave, which
requests are probes, and the words the record and `plan` say of it.

Arrivals (AIPerf's): constant gaps of 1/rate; Poisson (exponential gaps); gamma gaps of shape k and mean 1/rate
(k < 1 burstier than Poisson, k > 1 smoother). Each window draws from random.Random(seed + window), so a window
is the same in every run and in `run --resume`; the warm-up draws from seed - 1. Without a rate a window is a
closed loop: `concurrency` requests in flight, each answer starting the next.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.schema import Arrivals, LoadConfig
from orchestrator.config.synthetic import SYNTHETIC, led_text

WARMUP_WINDOW = -1  # the warm-up's window: its own seed, never a batch of the record


@dataclass(frozen=True)
class Slot:
    """One request of a window: its place (seq), when it is meant to leave (offset from the window's start,
    before any concurrency gate; None in a closed loop), and what it is."""

    seq: int
    offset_s: float | None
    probe: bool
    prompt_id: str  # a probe: the study's prompt; background: the background prompt's id, LEAD+OWN reusing LEAD
    max_tokens: int | None  # background: its prompt's own or background_max_tokens cycled; a probe: the protocol's


@dataclass(frozen=True)
class Pace:
    """How a window is sent: gaps between scheduled sends (None: a closed loop), the ceiling, the stop."""

    rate_per_s: float | None
    concurrency: int | None
    requests: int | None
    duration_s: float | None


def gaps_s(arrivals: Arrivals, rate_per_s: float, gamma_shape: float, rng: random.Random, count: int) -> list[float]:
    """`count` gaps between arrivals; the first request leaves at once, so gap 0 is 0."""
    mean = 1.0 / rate_per_s
    if arrivals is Arrivals.constant:
        draw = [mean] * (count - 1)
    elif arrivals is Arrivals.poisson:
        draw = [rng.expovariate(rate_per_s) for _ in range(count - 1)]
    else:  # gamma: shape k, scale mean/k, so the mean gap is 1/rate
        draw = [rng.gammavariate(gamma_shape, mean / gamma_shape) for _ in range(count - 1)]
    return [0.0, *draw][:count]


def offsets_s(pace: Pace, arrivals: Arrivals, gamma_shape: float, seed: int) -> list[float] | None:
    """Scheduled send offsets from the window's start; None for a closed loop. With a duration, every arrival
    before it (drawn in chunks, so a duration costs what it holds)."""
    if pace.rate_per_s is None:
        return None
    rng = random.Random(seed)
    if pace.requests is not None:
        return _cumulative(gaps_s(arrivals, pace.rate_per_s, gamma_shape, rng, pace.requests))
    assert pace.duration_s is not None
    out: list[float] = []
    now, chunk = 0.0, max(16, math.ceil(pace.rate_per_s * pace.duration_s * 1.2))
    first = True
    while True:
        gaps = gaps_s(arrivals, pace.rate_per_s, gamma_shape, rng, chunk + (1 if first else 0))
        for gap in gaps[0 if first else 1:]:
            now += gap
            if now >= pace.duration_s:
                return out
            out.append(now)
        first = False


def _cumulative(gaps: Sequence[float]) -> list[float]:
    out, now = [], 0.0
    for gap in gaps:
        now += gap
        out.append(now)
    return out


def window_pace(load: LoadConfig, warmup: bool = False) -> Pace:
    """The window's pace; the warm-up's own settings where it sets them."""
    if not warmup:
        return Pace(load.rate_per_s, load.concurrency, load.requests, load.duration_s)
    w = load.warmup
    return Pace(load.rate_per_s if w.rate_per_s is None else w.rate_per_s,
                load.concurrency if w.concurrency is None else w.concurrency,
                None if w.duration_s is not None else w.requests, w.duration_s)


def has_warmup(load: LoadConfig) -> bool:
    return bool(load.warmup.requests) or bool(load.warmup.duration_s)


def slots(load: LoadConfig, prompts: Sequence[str], background: Sequence[str], window: int,
          count: int | None = None, max_tokens: Mapping[str, int] | None = None) -> list[Slot]:
    """The window's requests in sending order (the warm-up's: window=WARMUP_WINDOW). Every probe_every-th is a
    probe, the study's prompts round robin; the others cycle the background prompts (shuffled per window, from
    the seed), each with its own max_tokens (`max_tokens`: the synthetic set's) or background_max_tokens cycled.
    `count`: a closed loop's length when its stop is a duration (as many as are sent: slot(seq) makes each)."""
    pace = window_pace(load, window == WARMUP_WINDOW)
    times = offsets_s(pace, load.arrivals, load.gamma_shape, load.seed + window)
    n = len(times) if times is not None else (pace.requests if pace.requests is not None else count or 0)
    order = _background_order(load, background, window)
    return [slot(load, prompts, order, seq, None if times is None else times[seq], window, max_tokens or {})
            for seq in range(n)]


def slot(load: LoadConfig, prompts: Sequence[str], background_order: Sequence[str], seq: int,
         offset_s: float | None, window: int, max_tokens: Mapping[str, int]) -> Slot:
    if seq % load.probe_every == 0:  # the first request of a window is a probe: every window has one
        return Slot(seq, offset_s, True, prompts[(seq // load.probe_every) % len(prompts)], None)
    k = seq - seq // load.probe_every - 1  # the k-th background request of the window
    own, cycled = background_order[k % len(background_order)], load.background_max_tokens
    lead = _lead(load, background_order, window, k)
    return Slot(seq, offset_s, False, own if lead == own else f"{lead}+{own}",
                max_tokens.get(own, cycled[k % len(cycled)]))


def _lead(load: LoadConfig, order: Sequence[str], window: int, k: int) -> str:
    """The prompt the k-th background request starts with: its own, or, for a share `synthetic.prefix_share` of
    them (each decided from the seed, the window and k), the one an earlier background request of the window
    started with (drawn among them alike), so every such prefix was sent before in the window."""
    share = load.synthetic.prefix_share if load.background == SYNTHETIC else 0.0
    while k > 0 and share > 0:
        rng = random.Random(f"{load.seed}/{window}/{k}")
        if rng.random() >= share:
            break
        k = rng.randrange(k)
    return order[k % len(order)]


def _background_order(load: LoadConfig, background: Sequence[str], window: int) -> list[str]:
    order = list(background)
    random.Random(load.seed * 7919 + window).shuffle(order)  # varied per window, the same in every run
    return order


def expected_requests(load: LoadConfig, warmup: bool = False) -> float | None:
    """Requests one window sends: its count, or rate x duration; None: a closed loop stopped by a duration
    (as many as the engine answers)."""
    pace = window_pace(load, warmup)
    if pace.requests is not None:
        return float(pace.requests)
    if pace.rate_per_s is None or pace.duration_s is None:
        return None
    return pace.rate_per_s * pace.duration_s


def label(load: LoadConfig) -> str:
    """The load point in words, the record's `load_point`: "poisson 8/s, at most 16 at once", "closed loop of 8"."""
    if load.rate_per_s is None:
        return f"closed loop of {load.concurrency}"
    shape = f"gamma (shape {load.gamma_shape:g})" if load.arrivals is Arrivals.gamma else load.arrivals.value
    ceiling = f", at most {load.concurrency} at once" if load.concurrency is not None else ""
    return f"{shape} {load.rate_per_s:g}/s{ceiling}"


@dataclass(frozen=True, eq=False)
class LoadWindow:
    """What a window's requests are made of (run/send/protocol.py makes them; a closed loop stopped by a duration
    makes more while it lasts): the bodies, the orders, where its request indices start."""

    phase: str
    index: int  # the window (batch_id), or WARMUP_WINDOW
    load: LoadConfig
    probes: dict[str, dict[str, Any]]  # study prompt id -> the cell's body
    compose: Callable[[str], dict[str, Any]]  # a background prompt's text -> its body (max_tokens set per request)
    texts: dict[str, str]  # background prompt id -> its text (the record's prompt hash)
    path: str
    first_index: int
    streamed: bool
    max_tokens: Mapping[str, int] = field(default_factory=dict)  # the synthetic set's, per prompt id

    @property
    def label(self) -> str:
        return label(self.load)

    def slot(self, seq: int, offset_s: float | None = None) -> Slot:
        order = _background_order(self.load, list(self.texts), self.index)
        return slot(self.load, list(self.probes), order, seq, offset_s, self.index, self.max_tokens)

    def lead(self, prompt_id: str) -> str | None:
        """The prompt a background request reusing a prefix starts with (None: it reuses none)."""
        lead, _, own = prompt_id.partition("+")
        return lead if prompt_id not in self.texts and lead in self.texts and own in self.texts else None

    def text(self, prompt_id: str) -> str:
        """A background request's prompt: its own, or the prefix it reuses and its own first words."""
        lead = self.lead(prompt_id)
        own = prompt_id.partition("+")[2]
        return self.texts[prompt_id] if lead is None else led_text(self.texts[lead], self.texts[own])

    def body(self, at: Slot) -> dict[str, Any]:
        if at.probe:
            return self.probes[at.prompt_id]
        return {**self.compose(self.text(at.prompt_id)), "max_tokens": at.max_tokens}
