"""What the comparison returns: typed results, rendered by report/ and serialised as report.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.analysis.locate_results import CellInside, Located

# A cell's signature: the finest one every warm response has (engines differ in what they return), finest
# first: the basis name -> the responses column holding its hash.
SIGNATURE_BASES = {"top_logprobs": "sig_top_logprobs", "token_ids": "sig_token_ids", "text": "sig_text"}
# What each basis hashes, as the report says it.
BASIS_WORDS = {"top_logprobs": "the top-k logprobs at 12 significant digits",
               "token_ids": "the token ids (no top logprobs returned)",
               "text": "the completion text (no top logprobs or token ids returned)"}


@dataclass
class Cell:
    """One (arm, prompt, phase) over its warm requests."""

    arm: str
    prompt_id: str
    phase: str
    n: int  # warm requests that got a parsable answer
    errors: int
    distinct_completions: int
    distinct_signatures: int | None  # None: no successful response to sign
    divergent: int | None  # requests whose signature differs from the cell's most common one
    upper_bound_95: float | None
    lower_bound_95: float | None
    signature_note: str = ""
    signature_basis: str = "top_logprobs"  # what the signatures hash: top_logprobs, token_ids or text
    first_divergent_position: int | None = None  # generated position where a request first differs
    top1_top2_gap: float | None = None  # at that position, in the reference request
    near_tie: bool | None = None
    max_generated_spread: float | None = None
    max_prompt_spread: float | None = None
    first_prompt_position_with_spread: int | None = None
    min_top1_agreement: float | None = None
    min_topk_overlap: float | None = None
    top_entries_min: int | None = None  # fewest top-logprob entries at any generated position
    top_entries_max: int | None = None  # most (min < max: the server's keys collapsed some entries)
    quality_pass: float | None = None  # share of answers passing the prompt's expectation
    quality_note: str = ""
    batch_size: int | None = None  # concurrent phases: requests per batch
    min_running_observed: int | None = None  # lowest running-request count seen during a batch
    max_send_spread_ms: float | None = None
    max_arrival_spread_ms: float | None = None  # the server's trace: first to last request complete there
    capacity: int | None = None  # requests the arm's engine runs at once (its max-num-seqs), where known
    co_resident: bool | None = None  # every batch: the server showed min(batch, capacity) running together
    batches: int | None = None
    batches_kept_out: int | None = None  # not co-resident: their rows are not in n, nor in any verdict
    # /metrics sampled, but no sample showed the batch running: co-residency not observed, kept out as well
    batches_not_observed: int | None = None
    transport_errors: int | None = None  # ReadError, timeouts and the like, over the cell's batches
    # protocol.stop_after_divergences ended this cell at its k-th divergence: lower bound only (analysis/stats.py)
    stopped_after: int | None = None
    # Top-1 flips, the seed's unit: (request, position) pairs whose generated token (the top-1 at temperature 0)
    # is another than the reference (modal) request's there, at positions where both have one; None: no tokens
    top1_flips: int | None = None
    top1_flip_positions: list[tuple[int, int]] | None = None  # (position, flips there): the first few, ascending
    top1_flip_position_count: int | None = None  # positions with a flip in all (more than listed: the rest)
    # the earliest generated position where the requests' logprobs of their generated token differ: where the
    # signatures part, a flipped token or not (first_divergent_position is the first flipped token)
    first_logprob_position: int | None = None
    # Against the arm's reference answer for the prompt (`reference`: "sequential", the first request of its first
    # sequential phase, or "cold", its cold request): requests whose signature differs from that answer, of
    # off_reference_of (the reference itself not counted). Unlike `divergent` (against the cell's modal answer),
    # it cannot fall when most of a batch takes the other answer. None: no reference answer for this cell
    off_reference: int | None = None
    off_reference_of: int | None = None
    reference: str | None = None

    @property
    def label(self) -> str:
        return f"{self.arm}/{self.prompt_id}/{self.phase}"


@dataclass
class BatchCheck:
    """One concurrent batch as the client sent it and the server ran it (analysis/batches.py)."""

    arm: str
    prompt_id: str
    phase: str
    batch_id: int
    size: int
    errors: int
    transport_errors: int  # ReadError, timeouts, refused or dropped connections
    send_spread_ms: float | None  # first to last request handed to the kernel, at the client
    arrival_spread_ms: float | None  # first to last request complete at the server (its trace)
    together: int | None  # most of the batch running at once
    # "server trace" (exact), "/metrics" (sampled), "not observed" (sampled, none showed it running: kept out)
    together_source: str | None
    capacity: int | None
    co_resident: bool | None


@dataclass
class ColdCheck:
    """The cold first request of an arm against the warm requests of its cell."""

    arm: str
    prompt_id: str
    phase: str
    matches_warm: bool | None  # None: not comparable (an error, or no signature)


@dataclass
class Divergence:
    """Two cells' signatures compared as distributions (analysis/compare.py `_verdict`), and where their
    reference requests part."""

    prompt_id: str
    # identical: one and the same signature on both sides; same distribution: the same signatures in the same
    # proportions; differ: the exact test's p-value below stats.ALPHA; no difference shown: at or above it;
    # not comparable: a side without signatures
    verdict: str
    first_divergent_position: int | None  # where the modal requests part, in cells that differ
    max_prompt_logprob_diff: float | None
    compared_on: str = "top_logprobs"  # the basis both sides were signed on (SIGNATURE_BASES), else "text"
    test: str = ""  # the test that gave `p_value`; "" where none was needed
    p_value: float | None = None


@dataclass
class ScheduleCheck(Divergence):
    """Within an arm and prompt, one phase against a later one (e.g. sequential vs concurrent)."""

    arm: str = ""
    phase_a: str = ""
    phase_b: str = ""


@dataclass
class PairCheck(Divergence):
    """An arm against the baseline (or a sweep's pair) for one prompt and phase."""

    arm_a: str = ""
    arm_b: str = ""
    phase: str = ""


@dataclass
class PooledBound:
    """An arm's cells pooled, with the assumption that makes pooling valid."""

    arm: str
    cells: int
    divergent: int
    n: int
    lower_bound_95: float
    upper_bound_95: float
    assumption: str
    # cells not in the pool: ended by protocol.stop_after_divergences (their n was not fixed), each a
    # divergence shown; `cells` counts the others
    left_out: list[str] = field(default_factory=list)


@dataclass
class WaveTime:
    """Arms that ran at the same time (study.parallel_arms), from the arms table: the first one's start to the
    last one's stop, against the same arms' times added up (what one after another would have taken)."""

    wave: int
    arms: list[str]
    wall_s: float
    arm_s: float


@dataclass
class PositionSeries:
    """Per-position spreads of one cell, for the plots."""

    arm: str
    prompt_id: str
    phase: str
    generated_spread: list[float | None] | None = None
    prompt_spread: list[float | None] | None = None
    top1_agreement: list[float | None] | None = None
    topk_overlap: list[float | None] | None = None


@dataclass
class ArmSummary:
    """An arm as the `arms` table records it."""

    arm: str
    status: str
    image_ref: str | None
    image_id: str | None
    error: str | None


@dataclass
class TopEntry:
    token: str
    logprob: float


@dataclass
class Flip:
    """Where a completion that parted on logprobs alone (a "logprob" split) later takes another token."""

    position: int
    top: list[TopEntry]  # its top-k there
    first_top: list[TopEntry]  # the first completion's top-k there
    gap: float | None  # the first completion's top1 - top2 there
    near_tie: bool | None


@dataclass
class Completion:
    """One completion of the explorer (analysis/explorer.py): a cell's modal one or one of its other branches,
    or an arm's modal one in an A/B pair; its tokens over the explorer's window, against the first one's."""

    name: str  # "modal", "branch 1", ...; in a pair, the arm
    signature: str | None  # None: its requests carry none
    requests: int
    request_ids: list[str]  # at most explorer.MAX_IDS; `requests` says how many in all
    tokens: list[str]  # generated tokens over the window (at `Explored.window_positions`)
    logprobs: list[float | None]  # the chosen token's logprob at each of them
    length: int  # generated tokens in all
    split: int | None = None  # first generated position (a character when signed on text) where it parts from
    # the first completion
    split_kind: str = ""  # "token": another token there; "logprob": the same tokens up to there and there, other
    # logprobs (the chosen token's or the top-k's); "character": signed on text, another character there
    top_at_split: list[TopEntry] = field(default_factory=list)  # its top-k at `split`
    first_top_at_split: list[TopEntry] = field(default_factory=list)  # the first completion's top-k there
    gap_at_split: float | None = None  # the first completion's top1 - top2 at `split`
    near_tie: bool | None = None
    flip: Flip | None = None  # after a "logprob" split: the first position with another token, a second fact
    phase_kind: str = ""  # sequential | concurrent
    batches: list[tuple[int, int]] = field(default_factory=list)  # (batch id, its size) of its requests
    co_residents: list[int] = field(default_factory=list)  # distinct counts of requests each ran alongside
    together: list[int] = field(default_factory=list)  # its batches' most-running-at-once (trace or /metrics)
    batch_sizes: list[int] = field(default_factory=list)  # every batch size it was seen in, all phases
    seen_in: dict[str, int] = field(default_factory=dict)  # phase -> requests of the arm and prompt with it
    text: str = ""  # signed on text: its completion from `text_start` (a character), bounded
    text_start: int = 0  # `Explored.window_start`, or nearer its own split when that lies far past it


@dataclass
class Explored:
    """Where a cell's completions split (kind "cell"), or an A/B pair's modal completions (kind "pair")."""

    kind: str
    label: str  # ARM/PROMPT/PHASE; a pair: ARM_B vs ARM_A/PROMPT/PHASE
    arm: str
    prompt_id: str
    phase: str
    n: int
    window_start: int  # the window's first token; signed on text, its first character
    completions: list[Completion]  # the modal (or arm A's) first
    more_branches: int = 0  # branches past the explorer's limit, counted only
    more_branch_requests: int = 0
    notes: list[str] = field(default_factory=list)
    basis: str = "tokens"  # "text": signed on the completion text (no tokens stored), positions are characters
    prefix: str = ""  # signed on text: the end of the prefix all completions share, before `window_start`
    window_positions: list[int] = field(default_factory=list)  # the token positions of `Completion.tokens`,
    # ascending from `window_start`; where they skip some (a split far from another), the views show "…"
    inside: Located | None = None  # where inside the model it split, from the run's digests (analysis/locate.py)


@dataclass
class ControlDrift:
    """One arm's cell against the control arm's cell of the same prompt and phase (study.control,
    analysis/control.py)."""

    arm: str
    control: str
    prompt_id: str
    phase: str
    n: int  # the arm's answered requests in the cell
    as_control: int  # of them, those whose text is the control's modal answer
    first_token_split: int | None  # where the modal answers' tokens part (None: they never do)
    max_logprob_drift: float | None  # |logprob - the control's| of the chosen tokens, before they part
    mean_logprob_drift: float | None
    note: str = ""  # why a figure is missing


@dataclass
class Comparison:
    cells: list[Cell] = field(default_factory=list)
    cold: list[ColdCheck] = field(default_factory=list)
    batches: list[BatchCheck] = field(default_factory=list)
    schedules: list[ScheduleCheck] = field(default_factory=list)
    pairs: list[PairCheck] = field(default_factory=list)
    pooled: list[PooledBound] = field(default_factory=list)
    positions: list[PositionSeries] = field(default_factory=list)
    explorer: list[Explored] = field(default_factory=list)  # every cell with more than one signature
    pair_explorer: list[Explored] = field(default_factory=list)  # every A/B pair that differs
    explorer_left_out: int = 0  # cells and pairs past explorer.MAX_EXPLORED, counted only
    inside: list[CellInside] = field(default_factory=list)  # a run with digests: where each cell split inside
    control_drift: list[ControlDrift] = field(default_factory=list)  # study.control: each arm's drift from it

    def to_json(self) -> dict[str, Any]:
        """As report.json holds it (a position series keeps only the series it has)."""
        out = asdict(self)
        out["positions"] = [{k: v for k, v in p.items() if v is not None} for p in out["positions"]]
        for explored in [*out["explorer"], *out["pair_explorer"]]:
            if explored["inside"] is None:  # only a run with digests has it (analysis/locate.py)
                del explored["inside"]
        for only in ("inside", "control_drift"):  # a run with digests, a study with a control
            if not out[only]:
                del out[only]
        return out
