"""What a study will cost before it runs (`plan`): per arm, the requests each cell takes and, from the record of
an earlier run of the same study (`plan --like RUN`), the engine time they should take.

An earlier run gives, per arm and phase, the mean time of one group as its engine took it: a sequential request
(send to answer), or a concurrent batch (first request sent to last answer). The estimate is the cold request,
the warm-up and every planned group at those means; with protocol.stop_after_divergences it is the most the arm
can take (a cell that diverges stops sooner)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from orchestrator.config import series
from orchestrator.config.schema import Config, PhaseConfig, PhaseKind
from orchestrator.errors import RecordError, counted, ordinal
from orchestrator.record.paths import RunPaths, read_json
from orchestrator.run.load.schedule import WARMUP_WINDOW, has_warmup, label
from orchestrator.run.send import protocol

UNKNOWN = "unknown (no earlier run: `plan ... --like RUN_DIR`)"
COLUMNS = ["arm", "prompt_id", "phase", "phase_kind", "batch_id", "role", "error", "send_ns", "recv_ns"]


def group_seconds(run_dir: Path, study: str) -> dict[tuple[str, str], float]:
    """(arm, phase or role `cold`/`warmup`) -> mean seconds per group in that run's record."""
    from orchestrator.record.tables import read_table

    paths = RunPaths(run_dir)
    if not paths.meta.is_file():
        raise RecordError(f"--like {run_dir}: not a run directory (no run.json); name a run dir `orchestrator "
                          "run` wrote")
    if (recorded := read_json(paths.meta).get("study")) != study:
        raise RecordError(f"--like {run_dir}: a run of study {recorded!r}, not {study!r}; name an earlier run of "
                          "this study")
    spans: dict[tuple[str, str, str], list[int]] = {}
    for index, row in enumerate(read_table(paths, "responses", COLUMNS).to_pylist()):
        if row["error"] is not None or row["send_ns"] is None or row["recv_ns"] is None:
            continue
        concurrent = row["role"] == protocol.MEASURED and row["phase_kind"] == PhaseKind.concurrent.value
        where = row["phase"] if row["role"] == protocol.MEASURED else row["role"]
        group = f"{row['prompt_id']}/{row['batch_id']}" if concurrent else str(index)
        span = spans.setdefault((row["arm"], where, group), [row["send_ns"], row["recv_ns"]])
        span[0], span[1] = min(span[0], row["send_ns"]), max(span[1], row["recv_ns"])
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (arm, where, _), (sent, answered) in spans.items():
        totals[(arm, where)].append((answered - sent) / 1e9)
    return {key: sum(values) / len(values) for key, values in totals.items()}


def arm_lines(config: Config, arm: str, seconds: dict[tuple[str, str], float] | None) -> list[str]:
    """The plan's lines for one arm: its requests per cell, and its expected engine time."""
    proto, prompts = config.protocol, len(config.prompts.prompts)
    phases = protocol.cell_phases(proto)
    cells = ", ".join(_cell(name, p, prompts) for name, p in phases.items())
    most = " at most" if proto.stop_after_divergences is not None or any(
        series.is_series(p) for p in proto.phases.values()) else ""
    stop = f"; a cell ends once {proto.stop_after_divergences} diverged (protocol.stop_after_divergences)" \
        if proto.stop_after_divergences is not None else ""
    rescore = ", then a re-score per distinct answer (protocol.rescore)" if proto.rescore else ""
    lines = [f"# arm {arm} requests:{most} {protocol.requests_per_arm(proto, prompts)} (1 cold, "
             f"{proto.warmup_requests} warm-up, per cell of {counted(prompts, 'prompt')}: {cells}{stop}){rescore}"]
    lines += [f"# arm {arm} {name}: {series.describe(p.load)}"
              for name, p in proto.phases.items() if series.is_series(p)]
    if seconds is None:
        return [*lines, f"# arm {arm} expected engine time: {UNKNOWN}"]
    groups = {"cold": 1, "warmup": proto.warmup_requests}
    groups |= {name: prompts * (p.batches if p.kind is PhaseKind.concurrent else p.repeats)
               for name, p in phases.items()}
    missing = [where for where, count in groups.items() if count and (arm, where) not in seconds]
    if missing:
        return [*lines, f"# arm {arm} expected engine time: unknown (the earlier run has no answered "
                        f"{', '.join(missing)} request of arm {arm})"]
    total = sum(count * seconds[(arm, where)] for where, count in groups.items() if count)
    means = ", ".join(f"{name} {seconds[(arm, name)]:.3g} s/{'batch' if p.kind is PhaseKind.concurrent else 'request'}"
                      for name, p in phases.items())
    return [*lines, f"# arm {arm} expected engine time:{most} {total:.3g} s (from the earlier run: {means})"]


def _cell(name: str, phase: PhaseConfig, prompts: int) -> str:
    """A phase's requests per cell in words; a load phase's windows and probes."""
    if phase.kind is PhaseKind.concurrent:
        return f"{name} {phase.batches} x {phase.repeats} = {protocol.cell_requests(phase)}"
    if phase.kind is PhaseKind.load:
        load = phase.load
        stop = f"{load.requests} requests" if load.requests is not None else f"{load.duration_s:g} s"
        warm = f", {protocol.window_requests(phase, WARMUP_WINDOW)} warm-up" if has_warmup(load) else ""
        closed = " and more while it lasts" if load.rate_per_s is None and load.duration_s is not None else ""
        every = "every request a probe" if load.probe_every == 1 else f"every {ordinal(load.probe_every)} a probe"
        point = series.parse(name)  # a series' later point: its rate is known once point 0's latency L is
        at = f"{load.arrivals.value} {load.rate_per_s:.3g}/L" if point and point[1] and load.rate_per_s else label(load)
        further = protocol.extended(name, phase)
        more = f", up to {counted(further, 'window')} more until steady" * bool(further)
        return (f"{name} {counted(protocol.cell_requests(phase, prompts), 'probe')} ({counted(load.windows, 'window')} "
                f"of {stop}{closed} at {at}, {every}{warm}; "
                f"{protocol.load_requests(phase)} in all{more})")
    return f"{name} {phase.repeats}"
