"""One study run: every arm in order (start, wait ready, protocol, stop), recorded as it goes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.config import resolve_prompts
from orchestrator.config.arms import build_spec, container_spec, effective_arm, runtime_for
from orchestrator.config.schema import ArmConfig, Config, PromptAs, RuntimeKind
from orchestrator.errors import OrchestratorError
from orchestrator.guard.fingerprint import arm_cell, log_facts, matrix_key, probe_container
from orchestrator.record.paths import RunPaths
from orchestrator.record.tables import TableWriter
from orchestrator.run import hosts, protocol
from orchestrator.run.client import CompletionClient, wait_ready
from orchestrator.run.progress import Progress
from orchestrator.run.sending import ProtocolSender, RunContext
from orchestrator.run.timings import StageTimer
from orchestrator.runtime.spec import Handle, Runtime, run_labels


@dataclass(frozen=True)
class ResumePlan:
    """`run --resume`: per arm, the groups to send again (run/resume.py); arms not named are complete."""

    attempt: int
    groups: dict[str, set[str]]


class StudyRunner:
    def __init__(self, config: Config, paths: RunPaths, run_id: str, runtime: Runtime,
                 host_env: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None,
                 resume: ResumePlan | None = None) -> None:
        self.config = config
        self.paths = paths.make()
        self.run_id = run_id
        self.runtime = self.default_runtime = runtime
        self._remote: dict[str, Runtime] = {}
        self.host_env = os.environ if host_env is None else host_env
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self.progress = Progress(self.say, live=None if say is None else False)  # bars only on a terminal
        self.labels = run_labels(run_id, study=config.study.name)
        self.failed: list[str] = []
        self.timer = StageTimer()
        self.resume = resume
        self._probes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-probe")

    def run(self) -> None:
        prompts = resolve_prompts(self.config.prompts, self.config.config_dirs)
        with TableWriter(self.paths, "arms", "arms", flush_rows=1) as arms_writer, self.progress:
            for name, arm in self.config.arms.items():
                if self.resume is not None and name not in self.resume.groups:
                    continue  # complete in the record
                self.runtime = self._runtime_for(arm)
                self._run_arm(name, arm, prompts, arms_writer)

    def _runtime_for(self, arm: ArmConfig) -> Runtime:
        """The arm's own Docker engine when it names one (many hosts), else the study's runtime."""
        if arm.docker_host is None or self.config.runtime.kind is not RuntimeKind.docker:
            return self.default_runtime
        if arm.docker_host not in self._remote:
            self._remote[arm.docker_host] = runtime_for(self.config.runtime, arm.docker_host)
        return self._remote[arm.docker_host]

    def cleanup(self) -> None:
        """Remove whatever of this run is left on every engine it used."""
        self._probes.shutdown(wait=False, cancel_futures=True)
        for runtime in (self.default_runtime, *self._remote.values()):
            runtime.cleanup(run_labels(self.run_id))

    def _run_arm(self, name: str, arm: ArmConfig, prompts: dict[str, str], arms_writer: TableWriter) -> None:
        row: dict[str, Any] = {"study": self.config.study.name, "run_id": self.run_id, "arm": name,
                               "config_json": json.dumps(asdict(arm), default=str, sort_keys=True),
                               "image_ref": arm.image, "status": "failed",
                               "attempt": self.resume.attempt if self.resume else 0}
        handle: Handle | None = None
        try:
            arm = effective_arm(arm, self.config.stand_in)
            row["image_ref"] = arm.image
            with self.timer.stage("image"):  # many hosts (run/hosts.py): shipped to the arm's engine, pinned by id
                image, image_source = hosts.resolve_image(self.runtime, self.default_runtime, arm.image,
                                                          build_spec(arm))
            row.update(image_id=image.id, image_repo_digests=list(image.repo_digests))
            spec = container_spec(name, arm, image.id, self.labels, self.host_env,
                                  scratch_root=self.paths.scratch_root.resolve())
            for mount in spec.mounts:
                if not mount.read_only and Path(mount.host).is_relative_to(self.paths.scratch_root.resolve()):
                    Path(mount.host).mkdir(parents=True, exist_ok=True)
            process = self.config.runtime.kind is RuntimeKind.process
            row.update(docker_run=spec.equivalent_command(process),
                       env_json=json.dumps(spec.redacted_env(), sort_keys=True))
            self.say(f"[{name}] starting {arm.image} ({image.id[:19]})")
            row["start_ns"] = time.time_ns()
            handle = self.runtime.start(spec)
            row["container_id"] = handle.id
            started = handle
            # The environment probe (versions, GPU, env, inside the arm) runs while the engine loads.
            probing = self._probes.submit(probe_container, self.runtime, handle, arm.secret_env, arm.python)
            wait_ready(handle.base_url, arm.health_path, arm.startup_timeout_s,
                       exit_code=lambda: self.runtime.exit_code(started),
                       log_tail=lambda: [line.text for line in self.runtime.logs(started, tail=50)],
                       transport=self.runtime.http_transport)
            row["ready_ns"] = time.time_ns()
            self.timer.add("start_to_ready", (row["ready_ns"] - row["start_ns"]) / 1e9)
            self.say(f"[{name}] ready at {handle.base_url} in {(row['ready_ns'] - row['start_ns']) / 1e9:.1f} s")
            with self.timer.stage("fingerprint"):
                fingerprint = self._arm_fingerprint(arm, handle, image.id, probing.result())
            fingerprint.update(image_source=image_source, ran_on=hosts.ran_on(self.runtime))
            row.update(fingerprint_json=json.dumps(fingerprint, sort_keys=True),
                       matrix_key=matrix_key(image.id, fingerprint))
            with self.timer.stage("requests"):
                sent = asyncio.run(self._send(name, arm, handle, prompts))
            self.say(f"[{name}] {sent} requests done")
            row["status"] = "completed"
        except OrchestratorError as exc:
            row["error"] = str(exc)
            self.failed.append(name)
            self.say(f"[{name}] FAILED: {exc}")
        except BaseException as exc:  # Ctrl-C and bugs: record, clean up, then let it through
            row["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            row["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            try:
                if handle is not None:
                    with self.timer.stage("stop_and_logs"):
                        self._stop(name, handle, row)
            finally:
                row["stop_ns"] = time.time_ns()
                arms_writer.append(row)  # the arm's row lands in every exit path

    def _stop(self, name: str, handle: Handle, row: dict[str, Any]) -> None:
        try:
            row["exit_code"] = self.runtime.stop(handle, self.config.runtime.stop_timeout_s)
            if reason := self.runtime.exit_reason(handle):
                row["error"] = f"{row['error']}; {reason}" if row.get("error") else reason
            with TableWriter(self.paths, "logs", name, flush_rows=10_000) as logs:
                for seq, line in enumerate(self.runtime.logs(handle)):
                    logs.append({"run_id": self.run_id, "arm": name, "container_id": handle.id,
                                 "stream": line.stream, "seq": seq, "timestamp": line.timestamp,
                                 "text": line.text})
        finally:
            self.runtime.remove(handle)

    def _arm_fingerprint(self, arm: ArmConfig, handle: Handle, image_id: str, probe: dict[str, Any]
                         ) -> dict[str, Any]:
        fingerprint = asyncio.run(self._fingerprint(handle))
        fingerprint["log_facts"] = log_facts(line.text for line in self.runtime.logs(handle))
        fingerprint["docker_host"] = arm.docker_host or self.config.runtime.docker_host or "local"
        fingerprint["probe"] = probe  # versions, GPU, env, from inside the arm with its own interpreter
        fingerprint["image_id"] = image_id
        fingerprint["cell"] = arm_cell(arm.engine_args, arm.gpus)
        return fingerprint

    async def _fingerprint(self, handle: Handle) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        client = CompletionClient(handle.base_url, timeout_s=30, transport=self.runtime.http_transport)
        try:
            for key, path in (("version", "/version"), ("models", "/v1/models")):
                exchange = await client.request("GET", path)
                try:
                    facts[key] = json.loads(exchange.body) if exchange.status == 200 else None
                except ValueError:
                    facts[key] = None
        finally:
            await client.aclose()
        return facts

    async def _send(self, name: str, arm: ArmConfig, handle: Handle, prompts: dict[str, str]) -> int:
        proto = self.config.protocol
        ctx = RunContext(self.config.study.name, self.run_id, name, proto.significant_digits,
                         self.resume.attempt if self.resume else 0)
        client = CompletionClient(handle.base_url, protocol.request_timeout_s(proto),
                                  transport=self.runtime.http_transport)
        try:
            sent: Mapping[str, str | list[int]] = prompts
            if proto.request.prompt_as is PromptAs.token_ids:
                sent = await protocol.token_ids(client, arm.served_model_name, prompts)
            groups = list(protocol.plan(proto, arm.served_model_name, sent, arm.endpoint, arm.request_extra))
            if self.resume is not None:
                groups = protocol.resent(groups, self.resume.groups[name], name, self.resume.attempt)
            self.progress.arm(name, dict(Counter(request.phase for group in groups for request in group)))
            with TableWriter(self.paths, "responses", name, on_row=self.progress.row) as writer:
                sender = ProtocolSender(ctx, prompts, writer, arm.metrics_path, arm.health_path,
                                        lambda: self.runtime.exit_code(handle),
                                        lambda text: self.say(f"[{name}] {text}"))
                return await sender.send(client, groups)
        finally:
            await client.aclose()
