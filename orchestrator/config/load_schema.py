"""A load phase's settings (docs/load.md): its rate, arrivals, concurrency, stop, windows and probes; its
background (the synthetic default, AIPerf's ISL/OSL); its warm-up; its series to saturation. Part of the config
schema (config/schema.py, which registers them with the rest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Arrivals(str, Enum):
    """How a load point's requests arrive under its rate (AIPerf's arrival patterns)."""

    constant = "constant"  # exactly 1/rate apart
    poisson = "poisson"  # exponential gaps: independent arrivals
    gamma = "gamma"  # gamma gaps of shape `gamma_shape`: below 1 burstier than Poisson, above 1 smoother


@dataclass
class LoadWarmupConfig:
    """Traffic sent before a load point's first window: recorded with role `warmup`, never counted."""

    requests: int = 0  # a count, or
    duration_s: float | None = None  # a duration (not both)
    rate_per_s: float | None = None  # null: the load point's
    concurrency: int | None = None  # null: the load point's
    # After the planned windows, up to this many more, each sent while the load point has no steady part or its
    # steady part has fewer windows than planned (analysis/steady.py): the warm-up extended until steady. 0: never
    extend_windows: int = 3


@dataclass
class LoadSeriesConfig:
    """A load phase as load points from one request at a time to saturation (config/series.py, docs/load.md)."""

    points: int = 0  # 0: one load point (no series); N >= 2: at most N points, point 0 one request at a time
    in_flight: int = 16  # the capacity estimate: this many requests in flight at latency L, the last point's rate
    tolerance: float = 0.1  # over-saturated once the answers' rate is below (1 - tolerance) x the arrivals' rate


@dataclass
class SyntheticConfig:
    """The default background (docs/load.md): AIPerf's synthetic ISL/OSL, input lengths in words (no tokenizer)."""

    prompts: int | None = None  # distinct prompts; null: 100, or the study's highest concurrency where higher
    input_words_mean: float = 100.0
    input_words_stddev: float = 25.0
    output_tokens_mean: float = 32.0
    output_tokens_stddev: float = 8.0
    prefix_share: float = 0.0  # share of its requests that start with a prompt sent before in the window


@dataclass
class LoadConfig:
    """A load point (phase kind `load`, docs/load.md), in AIPerf's terms: a rate with an arrival pattern, a
    concurrency (a ceiling under a rate, or a closed loop alone), a stop (a count or a duration) and a grace
    period. Every `probe_every`-th request is a probe: the cell's identical request, round robin over the
    study's prompts (role `measured`); the others are background traffic (role `background`)."""

    rate_per_s: float | None = None  # offered requests per second; null: a closed loop of `concurrency`
    arrivals: Arrivals = Arrivals.poisson
    gamma_shape: float = 1.0  # arrivals=gamma only
    concurrency: int | None = None  # at most this many in flight; alone: always this many
    requests: int | None = None  # a window ends after this many requests are sent, or
    duration_s: float | None = None  # after this long (not both)
    grace_s: float = 30.0  # after a window's stop, answers are awaited this long; later ones are cut, recorded
    windows: int = 6  # repeated windows of the load point: paired, their intervals (docs/load.md "How many windows")
    probe_every: int = 4  # every k-th request is a probe: probes arrive at rate_per_s / k
    # Background traffic: synthetic (load.synthetic); study (or null): the study's own prompts; else a prompt set's
    # file under prompts/. The last two cycle background_max_tokens
    background: str | None = "synthetic"
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    background_max_tokens: list[int] = field(default_factory=lambda: [16, 32, 64])
    stream: bool = True  # streamed answers: time to first token and inter-token latencies
    seed: int = 0  # of the arrival times, the background's order and its synthetic prompts
    warmup: LoadWarmupConfig = field(default_factory=LoadWarmupConfig)
    series: LoadSeriesConfig = field(default_factory=LoadSeriesConfig)  # points >= 2: to saturation
