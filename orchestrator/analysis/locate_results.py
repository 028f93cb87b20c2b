"""What `orchestrator locate` finds (analysis/locate.py), typed: the pair of requests compared, how their digests
were walked, the first module call where the same request's rows differ, the near-tie margin at the first flipped
token, and the op probe at that module's shapes. report.json holds it per explored cell (`Explored.inside`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

KERNEL = "kernel"  # input identical, output differs: the module's own computation split
BETWEEN = "between"  # input differs while every earlier output was equal: computation outside any module


@dataclass
class Side:
    """One request of the pair: its orchestrator request id, the engine's, where it ran and what it answered."""

    request_id: str
    phase: str
    phase_kind: str
    signature: str | None  # the cell's signature basis' hash; None: not signed
    requests: int  # requests of its branch (its signature in its cell)
    engine_request_id: str | None = None
    steps: int = 0  # engine steps with digests (0: the prefill)
    calls: int = 0  # digest rows (module calls) over those steps


@dataclass
class Call:
    """One side's module call at the first difference (a digest row, the numbers `locate` reports)."""

    call: int
    module: str
    module_type: str
    rows_total: int  # every row of the batch in the output's leading dims: the M of a GEMM
    in_shape: list[int]
    out_shape: list[int]
    batch_size: int  # requests in that engine step
    context_tokens: int  # that step's context (prompt plus tokens so far) of the request
    own_rows: int = 0  # the request's own rows of `rows_total` (0: not known)

    @property
    def packed(self) -> bool:
        """Several requests' tokens side by side in one row ([1, T, H], continuous batching)."""
        return bool(self.out_shape) and self.out_shape[0] == 1 and self.batch_size > 1 and \
            self.rows_total > self.own_rows > 0


@dataclass
class Difference:
    """The first (step, call) where the two requests' rows differ; `a` and `b` the two sides' calls there."""

    kind: str  # KERNEL or BETWEEN
    step: int  # 0: the prefill; k: the forward that produced token k + 1
    module: str
    module_type: str
    a: Call
    b: Call
    max_abs_diff: float | None  # over the first values of the output (out_head)
    rel_sum: float | None  # |a - b| / max(|a|, |b|) of out_sum, out_norm, out_absmax
    rel_norm: float | None
    rel_absmax: float | None
    input_recorded: bool = True  # the module got a tensor argument (its input hash is known)
    parent: str | None = None  # BETWEEN: the module whose own code ran between `before` and `module`
    before: str | None = None  # BETWEEN: the call before (its output equal on both sides); None: the step's first


@dataclass
class TopTwo:
    """A side's two most likely tokens at a position, with their logprobs."""

    token_id: int
    top: list[tuple[str, float]]  # up to two (token, logprob)
    gap: float | None  # top1 - top2 logprob


@dataclass
class Margin:
    """The first position where the two answers' token ids differ, with the top-1/top-2 margin of each."""

    position: int
    a: TopTwo
    b: TopTwo


@dataclass
class ProbeAsk:
    """The op probe at the first difference's real shapes: `orchestrator probe` with `preset` and `sets`."""

    op: str  # "gemm", "decode_attention", "prefill_attention"
    preset: str
    sets: list[str]  # KEY=VALUE overrides, as `--set` takes them
    shape: dict[str, int]  # M/K/N, or heads/kv_heads/head_dim/context
    m: list[int]  # the batch dimension the probe sweeps (rows, or sequences)
    arm: str  # the study's arm it runs as (its image, or its interpreter and code)
    command: str  # the exact command line
    note: str | None = None  # what could not be read from the digests, or why no probe matches
    packed: bool = False  # the split ran on a packed row the probe does not run: its verdict cannot settle it


@dataclass
class ProbeVerdict:
    """What `locate --probe` measured: whether row 0 of the op changed with M on this machine."""

    m_variant: bool | None  # None: no cell ran (unsupported)
    said: str  # one line: which M changed row 0, or that none did


@dataclass
class Located:
    label: str  # ARM/PROMPT/PHASE
    pair: str  # how the pair was taken, in words
    a: Side
    b: Side
    steps_compared: int
    calls_compared: int
    realigned_steps: list[int] = field(default_factory=list)  # steps whose module sequences differ: aligned by name
    one_sided_calls: int = 0  # calls of those steps without a counterpart of the same (module, occurrence)
    one_sided_steps: int = 0  # steps recorded on one side only (one answer is longer)
    mixed_calls: int = 0  # calls skipped: their rows mix the batch's requests on a side (MoE experts' inputs)
    difference: Difference | None = None  # None: identical digests over what was compared
    margin: Margin | None = None  # None: the two answers' token ids never differ
    probe: ProbeAsk | None = None
    no_probe: str | None = None  # why the op probe does not apply to this split (e.g. M equal on both sides)
    verdict: ProbeVerdict | None = None
    look_inside: str | None = None  # a scoped arm's split at a module not digested inside: the next run's overrides

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Located:
        """Back from report.json (asdict's form)."""
        out = {**data, "a": Side(**data["a"]), "b": Side(**data["b"])}
        if data.get("difference"):
            diff = data["difference"]
            out["difference"] = Difference(**{**diff, "a": Call(**diff["a"]), "b": Call(**diff["b"])})
        if data.get("margin"):
            margin = data["margin"]
            out["margin"] = Margin(margin["position"], *(TopTwo(**{**margin[s], "top": [
                (str(t), float(lp)) for t, lp in margin[s]["top"]]}) for s in ("a", "b")))
        for name, kind in (("probe", ProbeAsk), ("verdict", ProbeVerdict)):
            if data.get(name):
                out[name] = kind(**data[name])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in out.items() if k in known})


@dataclass
class CellInside:
    """A cell that ran beside other requests, in a run with digests: `locate` on its default pair (the report's
    "Where inside the model"), and the command that shows the details."""

    label: str  # ARM/PROMPT/PHASE
    command: str  # `orchestrator locate RUN --cell LABEL`
    located: Located | None = None
    refused: str | None = None  # why no pair could be taken (one line, as `locate` says it)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellInside:
        located = Located.from_json(data["located"]) if data.get("located") else None
        return cls(data["label"], data["command"], located, data.get("refused"))
