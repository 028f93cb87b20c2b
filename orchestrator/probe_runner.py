"""Kernel probes: run orchestrator/probes/gemm.py in an arm's image (or as a local process) and record it.

    orchestrator probe --preset cpu_small                      in a container of the preset's image
    orchestrator probe --preset h200_default --local           on this machine (the GPU host: no Docker)
    orchestrator probe --ingest RUN/probes-raw-1.jsonl ...     rebuild the table and report from raw output

The probe runs `processes` times with the same spec and seed, each in a fresh process (a fresh container
in Docker), and the table says per cell whether the processes' first outputs agree. Each process's raw
JSON lines are kept in RUN/probes-raw-N.jsonl; the rows land in the `probes` Parquet table
(RUN/data/probes) and a readable summary in RUN/probes.md (`render_markdown` builds it from rows).

This module needs only the standard library, PyYAML and pyarrow (plus the Docker SDK for containers),
so it runs on a GPU host that has no Hydra.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, RuntimeFailure, did_you_mean
from orchestrator.paths import RunPaths, atomic_write_text
from orchestrator.stats import POOLED_ASSUMPTION, divergence_bound, pooled_bound

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PRESETS_DIR = PROJECT_ROOT / "conf" / "probe"
PROBE_SCRIPT = Path(__file__).resolve().parent / "probes" / "gemm.py"
LABEL_NS = "org.orchestrator"  # the same namespace as runtime.base.LABEL_NS: `orchestrator clean` finds them
SPEC_KEYS = ("shapes", "m", "repeats", "hash_repeats", "seed", "arms", "device", "backend", "perturb_allocator",
             "mode", "layout_tolerance_ulps")


@dataclass
class ProbeConfig:
    """A probe preset (conf/probe/NAME.yaml). The spec fields go to gemm.py as they are."""

    name: str = "probe"
    # where it runs: a container of `image` (Docker), or a local process with `--local`
    image: str | None = None
    gpus: str | None = None  # null: none; "all"; or device ids "0,1" (Docker device requests)
    env: dict[str, str] = field(default_factory=dict)
    processes: int = 2  # separate processes with the same seed, compared cell by cell
    timeout_s: float = 900.0  # per process
    # the spec (orchestrator/probes/gemm.py documents each key)
    shapes: dict[str, list[int]] = field(default_factory=lambda: {"tiny": [256, 256]})  # name -> [K, N]
    m: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 8, 9, 16, 32, 64, 128, 256, 740, 1024, 4096, 5571])
    repeats: int = 30
    hash_repeats: int = 3
    seed: int = 0
    arms: list[str] = field(default_factory=lambda: ["bf16", "fp8_tensor", "fp8_rowwise", "fp8_block",
                                                     "fp8_block_ue8m0", "fp8_block_rowmajor"])
    device: str = "auto"
    backend: str = "auto"
    perturb_allocator: bool = False
    mode: str = "all"
    layout_tolerance_ulps: float = 4.0

    def __post_init__(self) -> None:
        problems = []
        if self.processes < 1:
            problems.append("processes must be >= 1")
        if self.repeats < 1:
            problems.append("repeats must be >= 1")
        if not self.shapes or any(len(v) != 2 or min(v) < 1 for v in self.shapes.values()):
            problems.append("shapes: give name: [K, N] with positive K and N")
        if not self.m or min(self.m) < 1:
            problems.append("m: a non-empty list of positive batch sizes")
        if self.mode not in ("all", "repeats", "m_invariance"):
            problems.append(f"mode '{self.mode}': expected all, repeats or m_invariance")
        if self.backend not in ("auto", "scaled_mm", "emulate"):
            problems.append(f"backend '{self.backend}': expected auto, scaled_mm or emulate")
        if problems:
            raise ConfigError(problems)

    def spec(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SPEC_KEYS}


def presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_config(preset: str | None = None, overrides: list[str] | None = None) -> ProbeConfig:
    """A preset name (conf/probe/NAME.yaml) or a YAML path, then KEY=VALUE overrides (values in YAML)."""
    import yaml

    data: dict[str, Any] = {}
    if preset:
        path = Path(preset) if preset.endswith((".yaml", ".yml")) else PRESETS_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise ConfigError(f"unknown probe preset '{preset}'.{did_you_mean(preset, presets())}")
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"'{item}': expected KEY=VALUE")
        data[key.strip()] = yaml.safe_load(value)
    known = {f.name for f in dataclasses.fields(ProbeConfig)}
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError([f"unknown probe key '{k}'.{did_you_mean(k, known)}" for k in unknown])
    return ProbeConfig(**data)


# --- running --------------------------------------------------------------------------------------
def run_local(config: ProbeConfig) -> list[str]:
    """Each process's stdout (JSON lines): gemm.py as a subprocess of this Python."""
    outputs = []
    env = {**os.environ, **config.env}
    for _ in range(config.processes):
        argv = [sys.executable, str(PROBE_SCRIPT), "--spec", json.dumps(config.spec())]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=config.timeout_s, env=env)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeFailure(f"the probe did not finish within {config.timeout_s:.0f} s") from exc
        if done.returncode != 0:
            raise RuntimeFailure(f"the probe exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        outputs.append(done.stdout)
    return outputs


def run_docker(config: ProbeConfig, run_id: str, docker_host: str | None = None) -> list[str]:
    """Each process in a fresh container of the arm's image: gemm.py passed as `python3 -c SOURCE`, no
    network, the arm's GPUs, labelled for `orchestrator clean`, always removed."""
    if not config.image:
        raise ConfigError("the probe needs an image to run in Docker: set image (or --image/--arm), "
                          "or pass --local to run it as a process here")
    import docker.types

    from orchestrator.runtime.docker import DockerRuntime

    client = DockerRuntime(docker_host).client
    source = PROBE_SCRIPT.read_text(encoding="utf-8")
    outputs = []
    for index in range(config.processes):
        kwargs: dict[str, Any] = dict(
            image=config.image, entrypoint=["python3"], command=["-c", source, "--spec", json.dumps(config.spec())],
            labels={f"{LABEL_NS}.run": run_id, f"{LABEL_NS}.probe": f"gemm-{index + 1}"},
            environment=dict(config.env), network_mode="none")
        if config.gpus:
            ids = None if config.gpus == "all" else [g.strip() for g in config.gpus.split(",")]
            kwargs["device_requests"] = [docker.types.DeviceRequest(
                count=-1 if ids is None else None, device_ids=ids, capabilities=[["gpu"]])]
        try:
            container = client.containers.create(**kwargs)
        except Exception as exc:
            raise RuntimeFailure(f"docker could not create a probe container of '{config.image}': {exc}") from exc
        try:
            container.start()
            try:
                status = int(container.wait(timeout=config.timeout_s)["StatusCode"])
            except Exception as exc:
                raise RuntimeFailure(f"the probe in '{config.image}' did not finish within "
                                     f"{config.timeout_s:.0f} s ({type(exc).__name__})") from exc
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            if status != 0:
                stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
                raise RuntimeFailure(f"the probe in '{config.image}' exited {status}: {stderr.strip()[-2000:]}")
            outputs.append(stdout)
        finally:
            with contextlib.suppress(Exception):  # already gone
                container.remove(force=True)
    return outputs


# --- recording --------------------------------------------------------------------------------------
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
    return env, cells


def rows_from_outputs(outputs: list[str], study: str, run_id: str, image: str | None) -> list[dict[str, Any]]:
    """Probe rows (store.PROBES) with the cross-process comparison and per-cell bounds filled in."""
    from orchestrator.store import PROBES

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
            row.update(study=study, run_id=run_id, process=process, image=image, torch=env.get("torch"),
                       gpu=env.get("gpu"), process_digests=seen,
                       processes_agree=(len(set(supported)) == 1) if len(supported) == len(outputs) > 1 else None)
            if cell.get("unsupported") is None and cell.get("repeats"):
                row["upper_bound_95"] = divergence_bound(int(cell["divergent_repeats"]), int(cell["repeats"]))[1]
            rows.append(row)
    return rows


def _key(cell: Mapping[str, Any]) -> tuple[Any, ...]:
    return cell["shape"], cell["arm"], cell["M"], cell.get("perturb_allocator")


def record(paths: RunPaths, rows: list[dict[str, Any]], outputs: list[str]) -> None:
    from orchestrator.store import TableWriter

    for index, output in enumerate(outputs, start=1):
        atomic_write_text(paths.root / f"probes-raw-{index}.jsonl", output)
    with TableWriter(paths, "probes", "probes", flush_rows=4096, flush_s=3600) as writer:
        for row in rows:
            writer.append(row)
    atomic_write_text(paths.root / "probes.md", render_markdown(rows))


# --- report --------------------------------------------------------------------------------------
def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled bound (with its assumption), cross-process agreement, flags, the device-compare speed-up."""
    ran = [r for r in rows if r.get("unsupported") is None and r.get("repeats")]
    production = [r for r in ran if not r.get("negative_control")]
    speedups = [r["speedup_per_call"] for r in ran if r.get("speedup_per_call")]
    largest = max(ran, key=lambda r: (r["M"] * r["N"], r.get("speedup_per_call") or 0), default=None)
    return {
        "cells": len(rows), "ran": len(ran), "unsupported": len(rows) - len(ran),
        "cells_with_divergence": sum(r["distinct_digests"] > 1 for r in ran),
        "pooled_production": pooled_bound([r["divergent_repeats"] for r in production],
                                          [r["repeats"] for r in production]) if production else None,
        "processes_disagree": sorted({(r["shape"], r["arm"], r["M"]) for r in ran
                                      if r.get("processes_agree") is False}),
        "row0_changes_with_m": sum(r.get("row0_bits_equal_m1") is False for r in production),
        "production_flagged": sorted({(r["shape"], r["arm"], r["M"]) for r in production if r.get("flagged")}),
        "negative_control_flagged": [sum(bool(r.get("flagged")) for r in ran if r.get("negative_control")),
                                     sum(bool(r.get("negative_control")) for r in ran)],
        "speedup_min": min(speedups, default=None), "speedup_max": max(speedups, default=None),
        "speedup_largest_cell": (largest or {}).get("speedup_per_call"),
    }


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def render_markdown(rows: list[dict[str, Any]]) -> str:
    """The probes section of a report: one line per cell (process 1), then the summary."""
    if not rows:
        return "## Kernel probes\n\nNo probe rows.\n"
    s = summary(rows)
    first = [r for r in rows if r.get("process") in (None, 1)]
    head = rows[0]
    lines = ["## Kernel probes (GEMM)", "",
             f"torch {head.get('torch')}, device {head.get('device')}"
             + (f" ({head['gpu']})" if head.get("gpu") else "")
             + (f", image {head['image']}" if head.get("image") else "")
             + f"; {max(r.get('process') or 1 for r in rows)} process(es) with seed {head.get('seed')}; "
             f"allocator perturbed: {_fmt(head.get('perturb_allocator'))}.", "",
             "| shape | arm | M | N | K | impl | repeats | distinct | upper bound 95% | processes agree | "
             "row 0 vs M=ref (bits equal / ulps) | vs float64 (ulps) | flagged | speed-up | unsupported |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | --- | ---: | --- |"]
    for r in first:
        if r.get("unsupported"):
            lines.append(f"| {r['shape']} | {r['arm']} | {r['M']} | {r['N']} | {r['K']} | - | - | - | - | - | - | - "
                         f"| - | - | {str(r['unsupported'])[:90].replace('|', '/')}... |")
            continue
        ref = f" (M={r['row0_ref_m']})" if r.get("row0_ref_m") not in (None, 1) else ""
        lines.append(
            f"| {r['shape']} | {r['arm']} | {r['M']} | {r['N']} | {r['K']} | {r.get('impl')} | {r['repeats']} "
            f"| {r['distinct_digests']} | {_fmt(r.get('upper_bound_95'))} | {_fmt(r.get('processes_agree'))} "
            f"| {_fmt(r.get('row0_bits_equal_m1'))} / {_fmt(r.get('row0_max_ulps_vs_m1'))}{ref} "
            f"| {_fmt(r.get('max_ulps_vs_float64'))} | {_fmt(r.get('flagged'))}"
            f"{' (negative control)' if r.get('negative_control') else ''} | {_fmt(r.get('speedup_per_call'))} | |")
    pooled = s["pooled_production"]
    lines += ["", f"- cells: {s['cells']} ({s['ran']} ran, {s['unsupported']} unsupported); cells with more than "
              f"one digest: {s['cells_with_divergence']}"]
    if pooled:
        lines.append(f"- pooled over the production cells: {pooled['divergent']} divergent of {pooled['n']} calls, "
                     f"upper bound 95% {pooled['upper_bound_95']:.4g} ({POOLED_ASSUMPTION}; without it, only the "
                     "per-cell bounds hold)")
    lines += [f"- separate processes with the same seed disagree in: {s['processes_disagree'] or 'no cell'}",
              f"- production cells whose row 0 differs bitwise from the reference M: {s['row0_changes_with_m']}",
              f"- production cells flagged against float64: {s['production_flagged'] or 'none'}",
              f"- negative control (row-major scale memory) flagged in {s['negative_control_flagged'][0]} of "
              f"{s['negative_control_flagged'][1]} cells",
              f"- device-side compare vs hashing every call on the CPU, per call: speed-up "
              f"{_fmt(s['speedup_min'])} to {_fmt(s['speedup_max'])} (largest cell: {_fmt(s['speedup_largest_cell'])})",
              ""]
    return "\n".join(lines)


# --- the verb ----------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="orchestrator probe", description="GEMM kernel probes (docs/probes.md).")
    parser.add_argument("--preset", default="cpu_small",
                        help=f"conf/probe/NAME.yaml or a YAML path ({', '.join(presets())})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset key")
    parser.add_argument("--local", action="store_true", help="run as a local process (hosts without Docker)")
    parser.add_argument("--image", help="run in a container of this image (overrides the preset)")
    parser.add_argument("--arm", help="take image and gpus from conf/arm/ARM.yaml")
    parser.add_argument("--out", type=Path, help="run directory (default runs/probes/PRESET-TIME)")
    parser.add_argument("--ingest", type=Path, nargs="+", metavar="RAW", help="record these raw JSONL outputs")
    parser.add_argument("--print-spec", action="store_true", help="print the JSON spec for gemm.py and exit")
    parser.add_argument("--docker-host", default=None)
    args = parser.parse_args(argv)
    config = load_config(args.preset, args.set)
    if args.arm:
        config = _with_arm(config, args.arm)
    if args.image:
        config.image = args.image
    if args.print_spec:
        print(json.dumps(config.spec()))
        return 0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    paths = RunPaths(args.out or PROJECT_ROOT / "runs" / "probes" / f"{config.name}-{stamp}")
    paths.root.mkdir(parents=True, exist_ok=True)
    run_id = f"probe-{config.name}-{stamp}-{os.getpid()}"
    started = time.monotonic()
    if args.ingest:
        outputs = [p.read_text(encoding="utf-8") for p in args.ingest]
    elif args.local:
        outputs = run_local(config)
    else:
        outputs = run_docker(config, run_id, args.docker_host)
    where = None if args.local or args.ingest else config.image
    rows = rows_from_outputs(outputs, config.name, run_id, where)
    record(paths, rows, outputs)
    print(render_markdown(rows))
    print(f"Record: {paths.table('probes')}\nReport: {paths.root / 'probes.md'}\n"
          f"wall: {time.monotonic() - started:.1f} s")
    return 0


def _with_arm(config: ProbeConfig, arm: str) -> ProbeConfig:
    import yaml

    path = PROJECT_ROOT / "conf" / "arm" / f"{arm}.yaml"
    if not path.is_file():
        choices = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"unknown arm '{arm}'.{did_you_mean(arm, choices)}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return dataclasses.replace(config, image=data.get("image", config.image), gpus=data.get("gpus", config.gpus))
