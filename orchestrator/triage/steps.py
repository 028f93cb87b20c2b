"""The triage's steps, in the seed's order ("Checks you can run"), each a study (triage/runner.py) sized from what
it must be able to show: `n` requests with none divergent give a one-sided 95 % upper bound of
analysis/stats.py's `upper_bound_zero(n)` (3/n roughly), so the floor takes `repeats_for_bound(target)`; the
starts take `repeats_for_bound(start_bound)` starts. Each cell stops once it has shown variation
(protocol.stop_after_divergences): a step is settled as soon as it varies."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.analysis.stats import repeats_for_bound, upper_bound_zero
from orchestrator.config.locations import CONF_DIR
from orchestrator.engines import profile_for
from orchestrator.engines.switches import Switch
from orchestrator.triage.runner import Source, StepSpec

AS_GIVEN = "as_given"  # the arm as the triage was given it, in every step
SETTLED_AFTER = 2  # divergent requests after which a cell has shown what it varies by
SCHEDULE_SEQUENTIAL = 4  # sequential requests per prompt beside the concurrent batches
DEFAULT_BATCH = 8  # the batch size where the arm sets no max_batch
START_STEPS = ("starts", "floor", "concurrent", "length")


@dataclass(frozen=True)
class Sizing:
    """What the triage must be able to show, and what it may spend."""

    target_bound: float  # the divergence rate a clean step bounds (95 %, one-sided)
    start_bound: float  # the start failure rate clean starts bound
    budget_requests: int
    long_prompt_tokens: int

    @property
    def floor_requests(self) -> int:
        return repeats_for_bound(self.target_bound)

    @property
    def starts(self) -> int:
        return repeats_for_bound(self.start_bound)


@dataclass(frozen=True)
class Planned:
    """A step as `--plan` shows it: its name, what it shows, and the requests it may send."""

    name: str
    shows: str
    requests: int
    spec: StepSpec


def _prompts(source: Source) -> dict[str, Any]:
    return dict(source.prompts.get("prompts") or {})


def _protocol(source: Source, phases: dict[str, Any], prompts: int) -> dict[str, Any]:
    return {"name": "triage", "endpoint": source.endpoint, "phases": phases, "stop_after_divergences": SETTLED_AFTER,
            "request": {**source.request, "digests": True} if _digests(source, phases, prompts) else source.request}


def _digests(source: Source, phases: dict[str, Any], prompts: int) -> bool:
    """Whether the step's requests ask for their activation digests, for `locate` where variation remains
    (triage/inside.py): on an engine that records them, unless the arm turned them off or a phase flags more
    requests than the engine keeps."""
    profile = profile_for(source.engine)
    if not profile.capabilities.digests or profile.digests_flag is None:
        return False
    off = (source.arm.get("engine_args") or {}).get(profile.digests_flag) is False
    flagged = max(math.ceil(p["load"]["requests"] * p["load"]["windows"] / p["load"]["probe_every"]) if "load" in p
                  else p["repeats"] * p.get("batches", 1) * prompts for p in phases.values())
    return not off and flagged <= (profile.digest_capacity or flagged)


def batch_size(source: Source) -> tuple[int, str]:
    """The engine's batch size (the arm's value of its profile's max_batch setting), and where it came from."""
    flag = profile_for(source.engine).settings.get("max_batch")
    value = (source.arm.get("engine_args") or {}).get(flag) if flag else None
    return (int(value), "the engine's batch size") if value else (DEFAULT_BATCH, "the arm sets no batch size")


def _spec(name: str, source: Source, phases: dict[str, Any], prompts: dict[str, Any], starts: int = 1
          ) -> StepSpec:
    return StepSpec(name, {AS_GIVEN: source.arm}, _protocol(source, phases, len(prompts)),
                    {"name": f"triage_{name}", "prompts": prompts}, source.runtime, starts=starts)


def first_steps(source: Source, sizing: Sizing) -> list[Planned]:
    """starts, the floor (cold first apart from warm), sequential against concurrent, a long prompt."""
    prompts = _prompts(source)
    per_prompt = math.ceil(sizing.floor_requests / max(1, len(prompts)))
    batch, where = batch_size(source)
    batches = max(1, math.ceil(sizing.floor_requests / (batch * max(1, len(prompts)))))
    long = {"long": {"file": str(CONF_DIR / "prompts" / "budget_text.txt"),
                     "length_tokens": sizing.long_prompt_tokens}}
    bound = f"<= {upper_bound_zero(per_prompt * len(prompts)):.1%} at 95 % when none diverges"
    return [
        Planned("starts", f"{sizing.starts} starts: start failures <= {upper_bound_zero(sizing.starts):.0%} at 95 % "
                "when all start; the first answers alike across starts", (sizing.starts + 1) * len(prompts),
                _spec("starts", source, {"sequential": {"kind": "sequential", "repeats": 1}}, prompts,
                      sizing.starts)),
        Planned("floor", f"{per_prompt} sequential repeats per prompt, the cold first apart from warm: {bound}",
                per_prompt * len(prompts) + 1,
                _spec("floor", source, {"sequential": {"kind": "sequential", "repeats": per_prompt}}, prompts)),
        Planned("concurrent", f"sequential against {batches} concurrent batch(es) of {batch} ({where}) per prompt",
                (SCHEDULE_SEQUENTIAL + batches * batch) * len(prompts) + 1,
                _spec("concurrent", source, {
                    "sequential": {"kind": "sequential", "repeats": SCHEDULE_SEQUENTIAL},
                    "concurrent": {"kind": "concurrent", "repeats": batch, "batches": batches}}, prompts)),
        Planned("length", f"a prompt of {sizing.long_prompt_tokens} tokens, {per_prompt} sequential repeats",
                per_prompt + 1, _spec("length", source, {"sequential": {"kind": "sequential", "repeats": per_prompt}},
                                      long)),
    ]


ONSET_JOBS = 8  # the most jobs an onset search runs (its width: a factor 2 on its log axis)
ONSET_REPEATS = 4  # requests per cell of each job


def onset_step(varied: str, first: list[Planned], sizing: Sizing) -> Planned | None:
    """The onset along the axis the variation appeared on (the onset sweeper): along the batch size where only
    concurrent batches varied, along the prompt's length where only the long prompt did; None where the arm varied
    already at one request at a time on the study's prompts (there is no onset to find on these axes)."""
    by_name = {p.name: p for p in first}
    if varied == "concurrent":
        spec, batch = by_name["concurrent"].spec, by_name["concurrent"].spec.protocol["phases"]["concurrent"]["repeats"]
        if batch < 2:
            return None
        # as many batches as fit in `batch` requests at each size: a job at batch size 1 holds `batch` requests, not
        # one (one batch a job left the H100's onset open: docs/triage.md); never more than `batch` a job
        batches = f"${{batches_of:${{.repeats}},{batch}}}"
        phases = {"sequential": {"kind": "sequential", "repeats": 2},
                  "concurrent": {"kind": "concurrent", "repeats": batch, "batches": batches}}
        axis = {"key": "protocol.phases.concurrent.repeats", "low": 1, "high": batch, "type": "int", "scale": "log"}
        target = {"arm": AS_GIVEN, "phase": "concurrent", "prompt": next(iter(spec.prompts["prompts"]))}
        shows, per_job = f"the onset along the batch size, 1 to {batch}", (2 + batch) * len(spec.prompts["prompts"])
    elif varied == "length":
        spec, high = by_name["length"].spec, sizing.long_prompt_tokens
        phases = {"sequential": {"kind": "sequential", "repeats": ONSET_REPEATS}}
        axis = {"key": "prompts.prompts.long.length_tokens", "low": 16, "high": high, "type": "int", "scale": "log"}
        target = {"arm": AS_GIVEN, "phase": "sequential", "prompt": "long"}
        shows, per_job = f"the onset along the prompt's length, 16 to {high} tokens", ONSET_REPEATS + 1
    else:
        return None
    protocol = {**{k: v for k, v in spec.protocol.items() if k != "stop_after_divergences"}, "phases": phases}
    settings = {"axis": axis, "target": target, "max_jobs": ONSET_JOBS, "width": 2 if axis["scale"] == "log" else None}
    return Planned("onset", f"{shows} ({ONSET_JOBS} jobs at most)", ONSET_JOBS * per_job,
                   replace(spec, name="onset", protocol=protocol, onset=settings))


LOAD_WINDOWS = 4  # the load point's windows: the fewest whose cost has a t interval worth reading (3 df)
LOAD_PROBE_EVERY = 3  # every 3rd request a probe (the study's prompts), the rest background
LOAD_WARMUP = 4  # requests sent before the first window, never counted


def load_step(source: Source, sizing: Sizing) -> Planned:
    """One load point (docs/load.md): a closed loop of the engine's batch size in flight, LOAD_WINDOWS windows of
    requests whose every third is a probe, the background the study's own prompts at its max_tokens; as many probes
    as the floor's requests, so a clean load point bounds divergence as the floor does, and its cost (throughput,
    latency) has an interval over its windows. No windows added past them (the budget holds)."""
    batch, where = batch_size(source)
    per_window = max(batch, math.ceil(sizing.floor_requests * LOAD_PROBE_EVERY / LOAD_WINDOWS))
    tokens = int(source.request.get("max_tokens") or 16)
    load = {"rate_per_s": None, "concurrency": batch, "requests": per_window, "windows": LOAD_WINDOWS,
            "probe_every": LOAD_PROBE_EVERY, "background": "study", "background_max_tokens": [tokens],
            "warmup": {"requests": LOAD_WARMUP, "extend_windows": 0}}
    spec = _spec("load", source, {"load": {"kind": "load", "load": load}}, _prompts(source))
    return Planned("load", f"a load point: {batch} in flight ({where}), {LOAD_WINDOWS} windows of {per_window} "
                   f"requests, every {LOAD_PROBE_EVERY}rd a probe: divergence under load and what the arm costs there",
                   per_window * LOAD_WINDOWS + LOAD_WARMUP, spec)


def open_switches(source: Source) -> list[Switch]:
    """The engine's determinism switches the arm has at a setting other than the repeatable one."""
    return [s for s in profile_for(source.engine).switches if not s.is_repeatable(source.arm)]


def switch_step(switch: Switch, witness: Planned) -> Planned:
    """The A/B of one switch with everything else pinned: the arm as given against the arm with the switch at its
    repeatable value, on the protocol and prompts of the step that showed the variation (its witness)."""
    fixed = f"{switch.name}_repeatable"
    arm = witness.spec.arms[AS_GIVEN]
    spec = StepSpec(f"switch_{switch.name}", {AS_GIVEN: arm, fixed: switch.set_repeatable(arm)},
                    witness.spec.protocol, witness.spec.prompts, witness.spec.runtime, {fixed: [switch.key]},
                    witness.spec.starts)
    return Planned(spec.name, f"{switch.key} at {switch.repeatable!r} against the arm as given, on the "
                   f"{witness.name} step's protocol", 2 * witness.requests, spec)


COST = "cost_"  # the cost step of a switch: cost_SWITCH


def cost_step(switch: Switch, load: Planned) -> Planned:
    """What the fix costs under load: the switch's A/B on the load point's protocol (both arms, paired windows),
    run where the switch removed the variation on another step's protocol."""
    ab = switch_step(switch, load)
    return replace(ab, name=f"{COST}{switch.name}", spec=replace(ab.spec, name=f"{COST}{switch.name}"),
                   shows=f"{switch.key} at {switch.repeatable!r} against the arm as given, at the load point: what "
                   "the fix costs under load")


def scaled(planned: Planned, left: int) -> Planned | None:
    """The step within `left` requests: its repeats cut in proportion (its bound then weaker, as it says), or None
    where not even two repeats a cell fit."""
    if planned.requests <= left:
        return planned
    if planned.spec.starts > 1:  # its starts are what it shows: fewer would not show its bound
        return None
    if planned.spec.onset is not None:  # an onset search stops at the requests it may send (hydra.sweeper)
        if left < 2 * planned.requests // ONSET_JOBS:
            return None
        return replace(planned, shows=f"{planned.shows} (at most {left} requests: the budget)", requests=left,
                       spec=replace(planned.spec, onset={**planned.spec.onset, "max_requests": left}))
    share = left / planned.requests
    phases = {}
    for name, phase in planned.spec.protocol["phases"].items():
        if phase["kind"] == "load":  # fewer requests a window: fewer probes, the same windows and warm-up
            load = phase["load"]
            requests = int((left - LOAD_WARMUP) / load["windows"])
            if requests < 2 * load["probe_every"]:  # not two probes a window
                return None
            phases[name] = {**phase, "load": {**load, "requests": requests}}
            continue
        key = "batches" if phase["kind"] == "concurrent" else "repeats"
        phases[name] = {**phase, key: int(phase[key] * share)}
    if any(p["kind"] == "sequential" and p["repeats"] < 2 for p in phases.values()):
        return None
    if any(p.get("batches", 1) < 1 for p in phases.values()):
        return None
    protocol = {**planned.spec.protocol, "phases": phases}
    return replace(planned, shows=f"{planned.shows} (cut to {share:.0%} by the budget)", requests=left,
                   spec=replace(planned.spec, protocol=protocol))
