"""One start of an arm's engine, from image to stop: its image resolved on its host, its engine started and
waited ready (the environment probe and the model's revision read meanwhile), its fingerprint, its stop with
its logs and memory peaks, and its `arms` row, which lands in every exit path."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from orchestrator.config.arms import Placement, ResolvedArm
from orchestrator.config.schema import Config
from orchestrator.engines import profile_for
from orchestrator.guard.fingerprint import arm_cell, log_facts, matrix_key, probe_container
from orchestrator.guard.model_revision import model_identity
from orchestrator.interrupts import run_async
from orchestrator.record.paths import RunPaths
from orchestrator.run.arm import exits, hosts
from orchestrator.run.arm.launch import Launch
from orchestrator.run.arm.resources import MemorySampler
from orchestrator.run.arm.server_facts import server_facts
from orchestrator.run.prefetch import table_writer
from orchestrator.run.timings import StageTimer
from orchestrator.run.wire.client import wait_ready
from orchestrator.runtime.spec import Handle, Runtime, run_labels
from orchestrator.runtime.traits import traits_of

TERMINAL_TAIL = 5  # an arm's last log lines said on failure; report.md has the rest


class ArmEngines:
    """Starts and stops the engines of one study's arms, on the runtime each launch names; `default_runtime`
    is the study's own host, where images are found before they are shipped (arm/hosts.py)."""

    def __init__(self, config: Config, paths: RunPaths, run_id: str, default_runtime: Runtime,
                 host_env: Mapping[str, str], say: Callable[[str], None], timer: StageTimer, attempt: int) -> None:
        self.config, self.paths, self.run_id, self.default_runtime = config, paths, run_id, default_runtime
        self.host_env, self.say, self.timer, self.attempt = host_env, say, timer, attempt
        self.labels = run_labels(run_id, study=config.study.name)
        self._probes = ThreadPoolExecutor(max_workers=max(1, len(config.arms)), thread_name_prefix="env-probe")

    def new_launch(self, resolved: ResolvedArm, runtime: Runtime, placed: Placement | None = None,
                   start: int = 0) -> Launch:
        name, arm = resolved.name, resolved.declared  # the record keeps the arm as declared
        row = {"study": self.config.study.name, "run_id": self.run_id, "arm": name,
               "config_json": json.dumps(asdict(arm), default=str, sort_keys=True),
               "engine": resolved.profile.name,  # the engine that answers: a stand-in's is not the declared one
               "image_ref": arm.image, "status": "failed", "attempt": self.attempt, "start": start}
        if placed is not None:
            row.update(placed_host=placed.host, wave=placed.wave, gpu_uuids=list(placed.gpu_uuids),
                       gpu_indices=list(placed.gpus), cpuset=placed.cpuset)
        return Launch(name, dataclasses.replace(resolved, placement=placed), row, runtime, start=start,
                      starts=self.config.study.starts)

    def launch(self, launch: Launch) -> None:
        """Image, container, environment probe, readiness: the arm's engine up and answering."""
        row, runtime, arm = launch.row, launch.runtime, launch.arm
        row["image_ref"] = arm.image
        with self.timer.stage("image"):  # many hosts (arm/hosts.py): shipped to the arm's Docker host, pinned by id
            image, launch.image_source = hosts.resolve_image(runtime, self.default_runtime, arm.image,
                                                             launch.resolved.build)
        launch.resolved = dataclasses.replace(launch.resolved, identity=image.id)
        row.update(image_id=image.id, image_repo_digests=list(image.repo_digests))
        spec = launch.resolved.spec(image.id, self.labels, self.host_env,
                                    scratch_root=self.paths.scratch_root.resolve())
        for mount in spec.mounts:
            if not mount.read_only and Path(mount.host).is_relative_to(self.paths.scratch_root.resolve()):
                Path(mount.host).mkdir(parents=True, exist_ok=True)
        row.update(docker_run=spec.equivalent_command(launch.resolved.on_host),
                   env_json=json.dumps(spec.redacted_env(), sort_keys=True))
        self.say(f"{launch.label} starting {arm.image} ({image.id[:19]})")
        # The model's revision (a local folder's hash: cached, but minutes the first time) while it loads.
        launch.model = self._probes.submit(model_identity, profile_for(arm.engine), arm.engine_args, arm.command,
                                           spec.mounts, launch.resolved.on_host)
        row["start_ns"] = time.time_ns()
        handle = launch.handle = runtime.start(spec)
        row["container_id"] = handle.id
        launch.sampler = MemorySampler(runtime, handle, spec.gpus).start()
        if not launch.start:  # the environment probe (versions, GPU, env, inside the arm) runs while it loads
            launch.probing = self._probes.submit(probe_container, runtime, handle, arm.secret_env,
                                                 launch.resolved.interpreter)
        paths = launch.resolved.profile.endpoints.overridden(arm.health_path, arm.metrics_path)
        wait_ready(handle.base_url, paths.health, arm.startup_timeout_s,
                   exit_code=lambda: runtime.exit_code(handle),
                   log_tail=lambda: [line.text for line in runtime.logs(handle, tail=50)],
                   transport=runtime.http_transport)
        row["ready_ns"] = time.time_ns()
        seconds = (row["ready_ns"] - row["start_ns"]) / 1e9
        if launch.start:
            self.say(f"{launch.label} ready in {seconds:.1f} s")
            return
        self.timer.add("start_to_ready", seconds)
        self.say(f"[{launch.name}] ready at {handle.base_url} in {seconds:.1f} s")

    def fingerprint(self, launch: Launch) -> None:
        """Its fingerprint and matrix key into its row: the server's facts and log lines, the environment
        probe from inside the arm with its own interpreter, the model's revision."""
        handle, runtime, arm = launch.handle, launch.runtime, launch.arm
        assert handle is not None and launch.probing is not None and launch.model is not None
        engine = launch.resolved.profile  # the engine that answers: a stand-in's is the reference engine
        with self.timer.stage("fingerprint"):
            fingerprint = run_async(server_facts(runtime, handle, engine.endpoints))
            fingerprint["log_facts"] = log_facts((line.text for line in runtime.logs(handle)), engine.name)
            fingerprint["docker_host"] = arm.docker_host or self.config.runtime.docker_host or "local"
            fingerprint["probe"] = launch.probing.result()
            fingerprint["image_id"] = launch.resolved.identity
            fingerprint["cell"] = arm_cell(arm.engine_args, arm.gpus, engine.name, *launch.model.result())
        fingerprint.update(image_source=launch.image_source, ran_on=hosts.ran_on(runtime))
        launch.row.update(fingerprint_json=json.dumps(fingerprint, sort_keys=True),
                          matrix_key=matrix_key(launch.resolved.identity, fingerprint))

    def failed(self, launch: Launch, exc: Exception, interrupted: bool) -> None:
        """Its row's error (with the signal that ended its engine) and the failure said, short: the whole
        log tail is in report.md. `interrupted`: its engine was removed under it (Ctrl-C in a wave)."""
        killed = "" if launch.handle is None else exits.killed(launch.runtime, launch.handle, traits_of(
            self.config.runtime.kind).memory_limits)
        head, newline, rest = str(exc).partition("\n")  # the first line is the reason: the signal goes there
        launch.row["error"] = f"{head}{killed}{newline}{rest}"
        if interrupted:
            launch.row["status"] = "interrupted"
        tail = getattr(exc, "log_tail", [])
        self.say(f"{launch.label} FAILED: {head or type(exc).__name__}{killed}"
                 + "".join(f"\n    {line}" for line in tail[-TERMINAL_TAIL:])
                 + (f"\n    ({len(tail)} log lines in report.md)" if len(tail) > TERMINAL_TAIL else ""))

    def finish(self, launch: Launch, stage: str) -> None:
        """Its engine stopped and removed, then its `arms` row written, in every exit path."""
        row = launch.row
        try:
            if launch.handle is not None:
                with self.timer.stage(stage):
                    self._stop(launch, launch.handle)
        finally:
            row["stop_ns"] = time.time_ns()
            model = launch.model
            if model is not None and model.done() and not model.cancelled() and model.exception() is None:
                row["model"], row["model_revision"] = model.result()
            with table_writer(self.paths, "arms", launch.name, flush_rows=1) as arms:  # a part of its own
                arms.append(row)  # the arm's row lands in every exit path

    def _stop(self, launch: Launch, handle: Handle) -> None:
        name, row, runtime = launch.name, launch.row, launch.runtime
        try:
            if launch.sampler is not None:  # its last reading while the engine still runs
                row.update(launch.sampler.stop().row())
            row["exit_code"] = runtime.stop(handle, self.config.runtime.stop_timeout_s)
            if (reason := runtime.exit_reason(handle)) and reason not in (row.get("error") or ""):
                row["error"] = f"{row['error']}; {reason}" if row.get("error") else reason
            with table_writer(self.paths, "logs", name, flush_rows=10_000) as logs:
                for seq, line in enumerate(runtime.logs(handle)):
                    logs.append({"run_id": self.run_id, "arm": name, "container_id": handle.id,
                                 "stream": line.stream, "seq": seq, "timestamp": line.timestamp,
                                 "text": line.text})
        finally:
            runtime.remove(handle)

    def close(self) -> None:
        self._probes.shutdown(wait=False, cancel_futures=True)

