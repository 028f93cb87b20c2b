"""The cost results (analysis/cost.py, starts.py, coresidents.py, rates.py): typed, serialised under report.json
`cost` with a schema version of its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.analysis.steady import SteadyPart


@dataclass
class Metric:
    """One cost metric, named as AIPerf's JSON export names its fields; the numbers are None, with `note`
    saying why ("not observable: ..."), where nothing measured it, never 0."""

    unit: str
    avg: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    std: float | None = None
    count: int = 0
    note: str = ""
    min: float | None = None  # AIPerf exports them too; the report's ranges (time to ready over starts)
    max: float | None = None


@dataclass
class PhaseCost:
    """What an arm cost at one load point (a `load` phase), over the steady part of its warm requests, probes and
    background (analysis/cost.py, steady.py). Throughput's avg is pooled (requests over the windows' summed spans),
    its percentiles and std are over the windows; `per_window` holds each metric's value in each counted window
    of `window_ids` (None: not measured there), for the ratios, and `schedules` each one's schedule digest (the
    same in A and B: the windows pair)."""

    arm: str
    phase: str
    load_point: str | None
    offered_rate_per_s: float | None  # None: a closed loop
    windows: int
    requests: int
    errors: int
    error_share: float | None
    request_throughput_per_s: Metric
    output_tokens_per_s: Metric
    latency_s: Metric  # end to end: the answer's end less the send
    time_to_first_token_s: Metric  # streamed requests only
    inter_token_latency_s: Metric  # streamed requests only: every gap between token chunks
    send_lateness_s: Metric  # actual send less scheduled send: the pacing error
    per_window: dict[str, list[float | None]] = field(default_factory=dict)
    window_ids: list[int] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)
    steady: SteadyPart = field(default_factory=lambda: SteadyPart(True))


@dataclass
class StartsSummary:
    """`study.starts`: how often an arm started, how long it took, its memory, and its first answers' signatures
    across starts (analysis/starts.py)."""

    arm: str
    starts: int
    ready: int  # starts that answered
    failure_lower_95: float
    failure_upper_95: float
    time_to_ready_s: Metric
    peak_memory_bytes: Metric
    peak_gpu_memory_bytes: Metric
    memory_note: str = ""
    model: str | None = None
    model_revision: str | None = None
    # prompt -> distinct signatures among the first answer of each start (1: every start answered alike)
    signatures_across_starts: dict[str, int] = field(default_factory=dict)


@dataclass
class CostRatio:
    """B's cost over A's for one metric at one load point ("" for the arm's own: time to ready, memory), the
    ratio of the replicates (windows, or starts) and its interval, found as `method` says: paired over windows of
    one schedule, else Welch's t on the logs (analysis/pairing.py)."""

    arm_a: str
    arm_b: str
    phase: str
    metric: str
    ratio: float | None
    lower_95: float | None
    upper_95: float | None
    replicates_a: int
    replicates_b: int
    note: str = ""  # why no ratio or no interval (one window, a value of 0, nothing measured, not steady)
    method: str = ""


@dataclass
class RateComparison:
    """Two arms' divergence rates in one (prompt, phase) cell, or pooled over a phase's cells (prompt "*"):
    B less A with Newcombe's interval, Fisher's exact test, the verdict on B (analysis/rates.py)."""

    arm_a: str
    arm_b: str
    prompt_id: str
    phase: str
    k_a: int
    n_a: int
    k_b: int
    n_b: int
    difference: float
    lower_95: float
    upper_95: float
    p_lower: float
    p_two_sided: float
    verdict: str  # lower, higher, not shown lower
    method: str


@dataclass
class CoResidents:
    """How many other requests of the arm ran alongside each probe of a load cell (analysis/coresidents.py)."""

    arm: str
    prompt_id: str
    phase: str
    probes: int
    least: int | None
    median: float | None
    most: int | None
    # "server trace" (steps overlapping), "/metrics" (sampled running count), "not observed" (/metrics gave
    # readings, none while these probes ran), "not observable" (neither)
    source: str
    observed: int | None = None  # probes whose co-residents were seen (least, median, most are over these)


@dataclass
class SaturationPoint:
    """One point of a series to saturation (analysis/saturation.py): what was offered, what the server did."""

    phase: str
    load_point: str | None
    offered_rate_per_s: float | None  # None: point 0, one request at a time
    throughput_per_s: float | None
    answer_share: float | None  # the answers' rate over the arrivals' (None: a closed loop)
    wait_slope: float | None  # the wait's growth, s per s of schedule
    over_saturated: bool
    why: str


@dataclass
class SaturationSeries:
    """An arm's series to saturation: its points in order (the last one the first that over-saturated, where
    one did), and the saturation point's bound: above `lower_per_s` (the most a point that kept up reached),
    below `upper_per_s` (the offered rate the server could not keep up with); None where not reached."""

    arm: str
    phase: str
    tolerance: float
    planned_points: int
    points: list[SaturationPoint] = field(default_factory=list)
    lower_per_s: float | None = None
    upper_per_s: float | None = None
    note: str = ""


@dataclass
class PhaseWorkload:
    """Whether an arm's load point ran a workload that is one (analysis/variety.py): its distinct prompts against
    the requests it held in flight, and how often a request's prompt started with one sent before in its window."""

    arm: str
    phase: str
    distinct_prompts: int  # the fewest distinct prompts (probes and background) of a window
    in_flight: float | None  # requests in flight on average over a window's span (Little's law), windows' mean
    prefix_seen_share: float | None  # of the requests with a prefix_seen (schema 8 on), those whose was seen
    warning: str | None  # fewer distinct prompts than requests in flight


@dataclass
class CostReport:
    """report.json `cost`: versioned apart from the rest, so a reader can tell what its fields mean."""

    schema_version: int = 2  # 2: phases' steady part, window ids, schedules; ratios' method
    starts: list[StartsSummary] = field(default_factory=list)
    phases: list[PhaseCost] = field(default_factory=list)
    ratios: list[CostRatio] = field(default_factory=list)
    rates: list[RateComparison] = field(default_factory=list)
    co_residents: list[CoResidents] = field(default_factory=list)
    saturation: list[SaturationSeries] = field(default_factory=list)  # load.series: each arm's series
    workloads: list[PhaseWorkload] = field(default_factory=list)
