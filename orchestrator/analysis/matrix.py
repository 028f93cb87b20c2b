"""The support matrix (issue 49): the seed's cell (model and revision, engine and version, runtime,
quantization, topology, hardware, flags, load point) of each arm and phase of a run, read from the record alone
(the arms table's config and fingerprint, report.json's cells, starts and load phases), and the cells of
several runs merged: a cell measured in several runs keeps each measurement and says whether they agree."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.analysis.stats import divergence_bound, t_quantile
from orchestrator.engines import profile_for
from orchestrator.record.identity import CODE
from orchestrator.record.recorded import ArmStart, RecordedRun

# Where the engine listens and what it serves are the cell's own columns, not flags; the interpreter's plumbing
# (a module path, buffering) differs from host to host and sets nothing of the engine.
NOT_FLAGS = frozenset({"host", "port", "model", "served-model-name"})
NOT_ENV_FLAGS = frozenset({"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"})
KEY_FIELDS = ("model", "model_revision", "engine", "engine_version", "runtime", "quantization", "topology",
              "hardware", "flags", "load_point")


@dataclass(frozen=True, order=True)
class CellKey:
    """The seed's cell; every field a string ("-": not recorded) so that keys sort and compare."""

    model: str
    model_revision: str
    engine: str
    engine_version: str
    runtime: str  # docker, process, ssh or slurm
    quantization: str
    topology: str  # tp=N pp=N dp=N, 1 where the arm's flags say none
    hardware: str  # the fingerprint's GPU name, else its CPU's
    flags: str  # the arm's engine_args that differ from its engine's defaults, and its env, sorted
    load_point: str  # a load phase's label; else the phase and its batch size

    def fields(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in KEY_FIELDS}


@dataclass(frozen=True)
class Measurement:
    """One run's answer for one cell: starts, divergence with its 95 % bound, cost where it has load phases."""

    key: CellKey
    run_id: str
    run_dir: str  # as given on the command line
    arm: str
    phase: str
    starts: int | None  # None: the run's report has no starts summary
    start_failures: int | None
    start_failure_upper_95: float | None
    n: int  # measured requests over the cell's prompts
    divergent: int
    divergence_lower_95: float
    divergence_upper_95: float
    output_tokens_per_s: float | None  # the phase's, as its report gives it
    output_tokens_per_s_lower_95: float | None  # Student's t interval of the mean over its windows (2 or more)
    output_tokens_per_s_upper_95: float | None
    latency_p50_s: float | None
    latency_p90_s: float | None
    onset: str = "-"  # where an onset search found this arm's divergence begins, its answer; "-": none searched
    side_effects: str = "-"  # what else its A/B against the baseline changed (guard/side_effects.py); "-": no A/B
    rerun: str = "-"  # the command that re-runs it; "-": an imported run names none


@dataclass(frozen=True)
class MatrixRow:
    """A cell and every run that measured it, sorted by run id; `agreement` says whether they agree."""

    key: CellKey
    measurements: tuple[Measurement, ...]
    agreement: str  # "one run", "agree" (divergence intervals overlap) or "differ"


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# What tells an imported run's arms apart where no engine args were recorded: detLLM's batch size and mode
IMPORTED_FLAGS = ("batch_size", "mode")


def _flags(config: dict[str, Any], engine: str | None) -> str:
    """The arm's flags against its engine's defaults (engines/ `defaults`): a flag set to its known default is left
    out, one that differs says the default beside it (`max-num-seqs=8 (default 16)`), one whose default the
    profile does not know is shown as set; then its env."""
    if "tool" in config and "engine_args" not in config:  # an imported run (imports/): its tool's own settings
        return " ".join(f"{k}={_value(config[k])}" for k in IMPORTED_FLAGS if config.get(k) is not None) or "-"
    args = {k: v for k, v in (config.get("engine_args") or {}).items() if k not in NOT_FLAGS and v is not None}
    env = {k: v for k, v in (config.get("env") or {}).items() if k not in NOT_ENV_FLAGS}
    parts = [f"{k}={_value(v)}" + ("" if default is None else f" (default {_value(default)})")
             for k, (v, default) in sorted(profile_for(engine).non_default(args).items())]
    parts += [f"env.{k}={v}" for k, v in sorted(env.items())]
    return " ".join(parts) or "-"


def _runtime(arm: ArmStart) -> str:
    ran_on = (arm.fingerprint or {}).get("ran_on") or {}
    if ran_on.get("slurm_job"):
        return "slurm"
    if arm.identity is not None and arm.identity.kind == CODE:  # its code ran as a process, not an image
        return "process"
    host = str((arm.fingerprint or {}).get("docker_host") or arm.config.get("docker_host") or "")
    return "ssh" if host.startswith("ssh://") else "docker"


def _topology(cell: dict[str, Any]) -> str:
    topology = cell.get("topology") or {}
    return " ".join(f"{short}={topology.get(name) or 1}" for short, name in
                    (("tp", "tensor_parallel"), ("pp", "pipeline_parallel"), ("dp", "data_parallel")))


def _engine_version(arm: ArmStart) -> str:
    fingerprint = arm.fingerprint or {}
    stated = (fingerprint.get("version") or {}).get("version") if isinstance(fingerprint.get("version"), dict) \
        else None
    if stated:
        return str(stated)
    packages = (fingerprint.get("probe") or {}).get("packages") or {}
    own = [f"{name} {packages[name]}" for name in profile_for(arm.engine).packages if packages.get(name)]
    return ", ".join(own) or "-"


def _hardware(arm: ArmStart) -> str:
    probe = (arm.fingerprint or {}).get("probe") or {}
    return _text((probe.get("gpu") or {}).get("name") or probe.get("cpu"))


def arm_key(arm: ArmStart, load_point: str) -> CellKey:
    """The cell of `arm` at `load_point`, from its recorded config and fingerprint."""
    cell = (arm.fingerprint or {}).get("cell") or {}
    return CellKey(model=_text(arm.model or cell.get("model")),
                   model_revision=_text(arm.model_revision or cell.get("model_revision")),
                   engine=_text(arm.engine or arm.config.get("engine")), engine_version=_engine_version(arm),
                   runtime=_runtime(arm), quantization=_text(cell.get("quantization")), topology=_topology(cell),
                   hardware=_hardware(arm), flags=_flags(arm.config, arm.engine or arm.config.get("engine")),
                   load_point=load_point)


def _load_point(cell: dict[str, Any], labels: dict[tuple[str, str], str]) -> str:
    label = labels.get((cell["arm"], cell["phase"]))
    if label:
        return label
    size = cell.get("batch_size")
    return f"{cell['phase']} batch {size}" if size else str(cell["phase"])


def measurements(run: RecordedRun, run_dir: str, report: dict[str, Any], at: str = "",
                 onset: Mapping[str, str] | None = None, side_effects: Mapping[str, str] | None = None,
                 ) -> list[Measurement]:
    """Each arm and phase of one run as a cell (its prompts pooled), from its arms table and report.json; `at`: an
    onset job's point on its axis, added to each load point; `onset` and `side_effects`: per arm, its search's
    answer and what else its A/B changed."""
    arms = {arm.arm: arm for arm in run.arms}
    cost = report.get("cost") or {}
    phases = {(p["arm"], p["phase"]): p for p in cost.get("phases") or []}
    labels = {where: str(p.get("load_point") or "") for where, p in phases.items()}
    # an imported run (docs/import.md): its tool observed no start and no runtime, and it names no re-run
    imported = bool(run.meta.imported)
    starts = {} if imported else {s["arm"]: s for s in cost.get("starts") or []}
    pooled: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in report.get("cells") or []:
        if cell.get("arm") in arms and cell.get("n"):
            pooled.setdefault((cell["arm"], cell["phase"]), []).append(cell)
    found = []
    for (arm, phase), cells in sorted(pooled.items()):
        n, k = sum(int(c["n"]) for c in cells), sum(int(c["divergent"]) for c in cells)
        low, high = divergence_bound(k, n)
        start, load = starts.get(arm) or {}, phases.get((arm, phase)) or {}
        rate = load.get("output_tokens_per_s") or {}
        windows = (load.get("per_window") or {}).get("output_tokens_per_s") or []
        low_rate, high_rate = mean_interval([v for v in windows if v is not None])
        latency = load.get("latency_s") or {}
        key = arm_key(arms[arm], _load_point(cells[0], labels) + (f" at {at}" if at else ""))
        found.append(Measurement(
            key=replace(key, runtime="-") if imported else key,
            rerun="-" if imported else f"orchestrator reproduce {run_dir}",
            run_id=run.meta.run_id, run_dir=run_dir,
            arm=arm, phase=phase, starts=start.get("starts"),
            start_failures=None if not start else int(start["starts"]) - int(start.get("ready") or 0),
            start_failure_upper_95=start.get("failure_upper_95"), n=n, divergent=k, divergence_lower_95=low,
            divergence_upper_95=high, output_tokens_per_s=rate.get("avg"), output_tokens_per_s_lower_95=low_rate,
            output_tokens_per_s_upper_95=high_rate, latency_p50_s=latency.get("p50"),
            latency_p90_s=latency.get("p90"), onset=(onset or {}).get(arm, "-"),
            side_effects=(side_effects or {}).get(arm, "-")))
    return found


def mean_interval(values: list[float]) -> tuple[float | None, float | None]:
    """95 % Student's t interval of the mean of `values`; (None, None) under two values."""
    if len(values) < 2:
        return None, None
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    half = t_quantile(0.975, len(values) - 1) * spread / len(values) ** 0.5
    return mean - half, mean + half


def agreement(found: list[Measurement]) -> str:
    """"agree" when every two measurements' divergence intervals overlap, else "differ"; one: "one run"."""
    if len(found) < 2:
        return "one run"
    overlap = max(m.divergence_lower_95 for m in found) <= min(m.divergence_upper_95 for m in found)
    return "agree" if overlap else "differ"


def merge(found: list[Measurement]) -> list[MatrixRow]:
    """The cells of every run, each with all its measurements, sorted by cell and run: the order of the runs
    given changes nothing."""
    cells: dict[CellKey, list[Measurement]] = {}
    for measurement in found:
        cells.setdefault(measurement.key, []).append(measurement)
    rows = []
    for key in sorted(cells):
        ordered = sorted(cells[key], key=lambda m: (m.run_id, m.run_dir, m.arm, m.phase))
        rows.append(MatrixRow(key, tuple(ordered), agreement(ordered)))
    return rows
