"""Kernel probes: ship orchestrator/probes/gemm.py or ops.py (bundled with the harness, `probes.bundle`) into
an arm's image (or run it as a local process) through the runtime, and record what it printed.

The probe runs `processes` times with the same spec and seed, each in a fresh process (a fresh container
in Docker), and the rows say per cell whether the processes' first outputs agree. Each process's raw
JSON lines are kept in RUN/probes-raw-N.jsonl; the rows land in the `probes` Parquet table (RUN/data/probes)
and report/probes.py renders RUN/probes.md from every probe row of the run dir. `orchestrator probe` exits 3
when an op its preset marks `expect_invariant` was not (or a must-vary control did not vary).

Each row carries the identity of what ran (`image_id`): the image id, or, as a process (`--local`), the code
identity of the interpreter (and `--arm`'s source), computed by the runtime exactly as the run computes an
arm's. A study's run dir may hold probe rows too (`orchestrator probe --arm ARM [--local] --out RUN_DIR`): its
report then names the ops measured batch-variant where an arm of the same identity ran whose batched cells
diverge (analysis/attribution.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import probes
from orchestrator.analysis.probes import ProbeSummary, summarize
from orchestrator.analysis.stats import divergence_bound
from orchestrator.config.locations import INHERIT_ENV, PROJECT_ROOT
from orchestrator.config.probe import ProbeConfig, RecordedArm, load_probe_config
from orchestrator.errors import ConfigError, ImageError, RuntimeFailure
from orchestrator.record.paths import RunPaths, atomic_write_text
from orchestrator.runtime.spec import BuildSpec, Runtime, run_labels

SPEC_REFUSED = 2  # probes/harness.py's refuse() (which needs torch, so not imported here)
LOCAL = "local"  # the "image" of a probe run as a local process


@dataclass(frozen=True)
class Where:
    """Where the probe runs and what it is: `image` as the record names it (a tag, the process arm's ref, or
    "local"), `identity` what ran (an image id, or a process arm's code identity, as the run records it for
    an arm), the interpreter and the GPUs."""

    image: str
    identity: str
    python: str
    gpus: str | None


def where(config: ProbeConfig, runtime: Runtime, local: bool) -> Where:
    """Docker: the preset's image (or `--arm`'s) looked up by id, never built. Local: the `--arm`'s interpreter
    and code identity (`runtime.resolve_image` with the arm's build spec, as the run has it), or this Python.
    A study's arm must be what the study ran: the same identity, else the probe would measure other code."""
    arm = config.of_arm
    if arm and arm.identity and local != arm.on_host:
        raise ConfigError(f"arm '{arm.name}' of the study ran in image {arm.arm.image} ({arm.identity[:19]}): probe it "
                          "there, without --local")
    if local:
        build = arm.build if arm else BuildSpec(interpreter=sys.executable)
        info = runtime.resolve_image(arm.arm.image if arm else LOCAL, build)
        at = Where(info.ref, info.id, build.interpreter, config.gpus if arm else "all")
    elif not config.image:
        raise ConfigError("the probe needs an image to run in Docker: set image (or --image/--arm), "
                          "or pass --local to run it as a process here")
    else:
        try:
            info = runtime.resolve_image(config.image, BuildSpec())
        except ImageError as exc:
            hint = (f"; if arm '{arm.name}' runs as a process (runtime=process), add --local to probe it under "
                    "its interpreter") if arm else ""
            raise ImageError(f"{exc}{hint}") from exc
        at = Where(config.image, info.id, arm.arm.python if arm else "python3", config.gpus)
    if arm and arm.identity and at.identity != arm.identity:
        raise ImageError(f"arm '{arm.name}' of the study ran {arm.identity[:27]}, and what would run here is "
                         f"{at.identity[:27]}: the probe would measure other code. Probe where the study ran, "
                         "with the same image, or the same interpreter, packages and source")
    return at


def probe_config(preset: str, overrides: list[str], arm: str | None, image: str | None, dirs: list[Path],
                 out: Path | None) -> ProbeConfig:
    """The preset as `--arm` runs: the arm of that name of the study in `out` (the run dir the probe records
    into) as the study ran it, else the arm file of that name (`config.probe.with_arm`)."""
    return load_probe_config(preset, overrides, (study_arm(out, arm) or arm) if arm else None, image, dirs)


def study_arm(run_dir: Path | None, name: str) -> RecordedArm | None:
    """The arm `name` as the arms table of the study in `run_dir` has it; None where there is no such arm."""
    from orchestrator.record.recorded import read_run

    if run_dir is None or not RunPaths(run_dir).table("arms").is_dir():
        return None
    starts = [arm for arm in read_run(RunPaths(run_dir)).starts if arm.arm == name]
    if not starts:
        return None
    if starts[-1].image_id is None:
        raise ConfigError(f"arm '{name}' of the study in {run_dir} did not start: no identity to probe it as; "
                          "run the study again, or name an arm file (conf/arm/NAME)")
    identity = starts[-1].identity
    assert identity is not None  # image_id is set, so it reads
    return RecordedArm(name, starts[-1].config_json or "{}", starts[-1].image_id, identity.kind)


def run_probe(config: ProbeConfig, runtime: Runtime, run_id: str, at: Where) -> list[str]:
    """Each process's stdout (JSON lines): a fresh container of the image (by id) per process, the probe
    bundled as `python3 -c SOURCE`, no network, the GPUs; or a fresh process of the interpreter."""
    argv = ["-c", probes.bundle(config.probe), "--spec", json.dumps(config.spec())]
    outputs = []
    for index in range(config.processes):
        result = runtime.run_oneshot(at.identity, argv, run_labels(run_id, purpose=f"{config.probe}-{index + 1}"),
                                     [at.python], config.timeout_s, env=config.env, gpus=at.gpus)
        if result.exit_code == SPEC_REFUSED:  # the probe named what its spec gets wrong: bad input
            said = [ln for ln in result.output.strip().splitlines() if ln.strip()]
            raise ConfigError(f"probe {config.name}: {said[-1] if said else 'its spec was refused'}")
        if result.exit_code != 0:
            raise RuntimeFailure(f"the probe in {at.image} exited {result.exit_code}: {result.output.strip()[-2000:]}")
        outputs.append(result.output)
    return outputs


def parse(output: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(env header, cells) from one process's JSON lines."""
    env: dict[str, Any] = {}
    cells = []
    for line in output.splitlines():
        if not line.strip().startswith("{"):
            continue
        row = json.loads(line)
        if row.get("kind") == "env":
            env = row
        elif row.get("kind") == "cell":
            cells.append(row)
        elif row.get("kind") == "done":  # what the contention ran, known once the probe is over
            env["contend_matmuls"] = row.get("contend_matmuls")
    return env, cells


def rows_from_outputs(outputs: list[str], study: str, run_id: str, at: Where | None) -> list[dict[str, Any]]:
    """Probe rows (store.PROBES) with the cross-process comparison and per-cell bounds filled in."""
    from orchestrator.record.schemas import PROBES

    parsed = [parse(o) for o in outputs]
    first_by_cell: dict[tuple[Any, ...], list[str | None]] = defaultdict(list)
    for _, cells in parsed:
        for cell in cells:
            first_by_cell[_key(cell)].append(cell.get("first_digest"))
    rows = []
    names = PROBES.names
    for process, (env, cells) in enumerate(parsed, start=1):
        for cell in cells:
            row = {k: cell.get(k) for k in names}
            seen = first_by_cell[_key(cell)]
            supported = [d for d in seen if d is not None]
            row.update(study=study, run_id=run_id, process=process, image=at.image if at else None,
                       image_id=at.identity if at else None, torch=env.get("torch"),
                       gpu=env.get("gpu"), process_digests=seen, contend_matmuls=env.get("contend_matmuls"),
                       processes_agree=(len(set(supported)) == 1) if len(supported) == len(outputs) > 1 else None)
            if cell.get("unsupported") is None and cell.get("repeats"):
                row["upper_bound_95"] = divergence_bound(int(cell["divergent_repeats"]), int(cell["repeats"]))[1]
            rows.append(row)
    return rows


def _key(cell: Mapping[str, Any]) -> tuple[Any, ...]:
    return cell["shape"], cell["arm"], cell["M"], cell.get("perturb_allocator")


def record(paths: RunPaths, rows: list[dict[str, Any]], outputs: list[str], kind: str = "gemm") -> None:
    """Raw outputs (probes-raw-N.jsonl for GEMM, probes-ops-raw-N.jsonl for ops), the rows appended to the
    probes table, and RUN/probes.md from every probe row the run dir holds (GEMM and ops alike)."""
    from orchestrator.record.tables import TableWriter, read_table
    from orchestrator.report.probes import render_markdown

    prefix = "probes" if kind == "gemm" else f"probes-{kind}"
    for index, output in enumerate(outputs, start=1):
        atomic_write_text(paths.root / f"{prefix}-raw-{index}.jsonl", output)
    with TableWriter(paths, "probes", prefix, flush_rows=4096, flush_s=3600) as writer:
        for row in rows:
            writer.append(row)
    atomic_write_text(paths.root / "probes.md", render_markdown(read_table(paths, "probes").to_pylist()))


@dataclass
class ProbeRun:
    """What `orchestrator probe` made: where, the rows (one per cell and process), their summary."""

    paths: RunPaths
    rows: list[dict[str, Any]]
    summary: ProbeSummary


def probe(config: ProbeConfig, runtime: Runtime, out: Path | None, local: bool,
          ingest: list[Path] | None) -> ProbeRun:
    """`orchestrator probe`: run (or ingest) the probe, record rows, raw outputs and RUN/probes.md."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    paths = RunPaths(out or PROJECT_ROOT / "runs" / "probes" / f"{config.name}-{stamp}")
    run_id = f"probe-{config.name}-{stamp}-{os.getpid()}"
    at = None
    if ingest:
        outputs = [p.read_text(encoding="utf-8") for p in ingest]
    else:
        at = where(config, runtime, local)
        outputs = run_probe(config, runtime, run_id, at)
    paths.root.mkdir(parents=True, exist_ok=True)  # once there is something to record: a refused spec leaves none
    rows = rows_from_outputs(outputs, config.name, run_id, at)
    record(paths, rows, outputs, config.probe)
    return ProbeRun(paths, rows, summarize(rows))


def probe_runtime(local: bool, docker_host: str | None) -> Runtime:
    """The runtime a probe runs on, as RuntimeConfig's defaults make it, without the Hydra schema (absent on a
    GPU machine): a local process, or Docker."""
    from orchestrator.runtime import make_runtime

    return make_runtime("process" if local else "docker", docker_host=docker_host, inherit_env=INHERIT_ENV,
                        workdir=PROJECT_ROOT)
