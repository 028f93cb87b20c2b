"""One study run: every arm in order (start, wait ready, protocol, stop), recorded as it goes.

With `study.starts: N` each arm is started N - 1 more times right after (in its thread, its wave): each a fresh
engine of the same spec, waited ready, sent one request per prompt, stopped (run/send/starts.py); a start that fails
fails the arm (exit 4), and the next start still runs.

With `runtime.overlap_arm_starts` the next arm is started while the current one runs its sequential phases
(the guard has refused arms that share a device, a cache or a port); before any concurrent batch the current
arm waits until that start has ended, so nothing loads during a batch."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.analysis.stopping import StopRule
from orchestrator.config import resolve_prompts
from orchestrator.config.arms import Placement, ResolvedArm, resolve_arms, runtime_for
from orchestrator.config.background import phase_backgrounds
from orchestrator.config.schema import Config, PhaseKind, PromptAs
from orchestrator.engines import profile_for
from orchestrator.errors import OrchestratorError, counted
from orchestrator.guard.fingerprint import arm_cell, log_facts, matrix_key, probe_container
from orchestrator.guard.model_revision import model_identity
from orchestrator.interrupts import run_async
from orchestrator.record.paths import RunPaths
from orchestrator.run import placement
from orchestrator.run.arm import exits, hosts
from orchestrator.run.arm.launch import Launch, ResumePlan
from orchestrator.run.arm.resources import MemorySampler
from orchestrator.run.arm.server_facts import server_facts
from orchestrator.run.arm.stop_behind import StopsBehind, may_stop_behind
from orchestrator.run.prefetch import Prefetch
from orchestrator.run.progress import Progress
from orchestrator.run.send import digests, prompt_length, protocol, starts
from orchestrator.run.send.sender import ProtocolSender, RunContext
from orchestrator.run.timings import StageTimer
from orchestrator.run.wire.client import CompletionClient, wait_ready
from orchestrator.runtime.spec import Handle, Runtime, run_labels
from orchestrator.runtime.traits import traits_of

if TYPE_CHECKING:
    from orchestrator.record.tables import TableWriter


class StudyRunner:
    def __init__(self, config: Config, paths: RunPaths, run_id: str, runtime: Runtime,
                 host_env: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None,
                 resume: ResumePlan | None = None, arms: Mapping[str, ResolvedArm] | None = None) -> None:
        """`arms`: each arm as `refusals` resolved it (config/arms.py; made here for a caller with the config)."""
        self.config = config
        self.arms = dict(resolve_arms(config) if arms is None else arms)
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
        self._probes = ThreadPoolExecutor(max_workers=max(1, len(config.arms)), thread_name_prefix="env-probe")
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="early-start")
        self._prefetch = Prefetch()  # imports needed once the first engine answers, made while it loads
        self._upcoming: ResolvedArm | None = None  # the arm that may start early, while one runs
        self._early: dict[str, tuple[Launch, Future[None]]] = {}
        self._stops = StopsBehind()  # an arm's stop while the next one starts (run/arm/stop_behind.py)
        self._interrupted = False  # Ctrl-C while arms ran side by side: their failures are the interruption
        self._prompts: dict[str, str] = {}

    def run(self) -> None:
        self._prefetch.start()
        self._prompts = resolve_prompts(self.config.prompts, self.config.config_dirs)
        with self.progress:
            todo = [arm for name, arm in self.arms.items()
                    if self.resume is None or name in self.resume.groups]  # the others are complete
            if placement.uses_placement(self.config):
                self._run_waves(self.placements([arm.name for arm in todo]))
                return
            try:
                for arm, upcoming in zip(todo, [*todo[1:], None], strict=True):
                    self.runtime = self._runtime_for(arm)
                    # Early only on the same host: the launch uses this arm's runtime.
                    early = self.config.runtime.overlap_arm_starts and upcoming is not None \
                        and self._runtime_for(upcoming) is self.runtime
                    self._upcoming = upcoming if early else None
                    behind = may_stop_behind(self.config, arm.name, upcoming.name if upcoming else None)
                    self._run_arm(self._new_launch(arm, self.runtime), stop_behind=behind)
                self._stops.raise_failure()
            finally:
                self._stops.close()

    def placements(self, arms: list[str]) -> list[list[Placement]]:
        """The waves of `study.parallel_arms` over the inventories of the hosts the arms may run on."""
        return placement.waves(self.config, lambda host: self._runtime_on(host).inventory(), arms, self.arms)

    def _run_waves(self, waves: list[list[Placement]]) -> None:
        """Each wave's arms at once, each in a thread of its own with its own host, client and record parts;
        the next wave once every arm of this one has stopped."""
        for number, wave in enumerate(waves, 1):
            together = " at the same time" if len(wave) > 1 else " alone (the next arm needs what it holds)"
            self.say(f"wave {number}/{len(waves)}: {', '.join(p.arm for p in wave)}{together}")
            pool = ThreadPoolExecutor(max_workers=len(wave), thread_name_prefix="arm")
            launches = [self._new_launch(self.arms[p.arm], self._runtime_on(p.host), p) for p in wave]
            futures = [pool.submit(self._run_arm, launch) for launch in launches]
            try:
                wait_all(futures)
            except BaseException:  # Ctrl-C: stop every arm of the wave now, then let it through
                self._interrupted = True
                self.cleanup()
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            for future in futures:
                future.result()  # a bug in one arm's thread is raised here

    def _runtime_for(self, arm: ResolvedArm) -> Runtime:
        """The arm's own Docker host when it names one (many hosts), else the study's runtime."""
        return self._runtime_on(arm.arm.docker_host)

    def _runtime_on(self, host: str | None) -> Runtime:
        """A Docker host by URL ("local" or None: the study's runtime)."""
        if host in (None, placement.LOCAL) or not traits_of(self.config.runtime.kind).ships_images:
            return self.default_runtime
        assert host is not None
        if host not in self._remote:
            self._remote[host] = runtime_for(self.config.runtime, host)
        return self._remote[host]

    def cleanup(self) -> None:
        """Remove whatever of this run is left on every host it used."""
        self._probes.shutdown(wait=False, cancel_futures=True)
        self._starter.shutdown(wait=False, cancel_futures=True)
        for runtime in (self.default_runtime, *self._remote.values()):
            runtime.cleanup(run_labels(self.run_id))

    def _new_launch(self, resolved: ResolvedArm, runtime: Runtime, placed: Placement | None = None,
                    start: int = 0) -> Launch:
        name, arm = resolved.name, resolved.declared  # the record keeps the arm as declared
        row = {"study": self.config.study.name, "run_id": self.run_id, "arm": name,
               "config_json": json.dumps(asdict(arm), default=str, sort_keys=True),
               "engine": resolved.profile.name,  # the engine that answers: a stand-in's is not the declared one
               "image_ref": arm.image, "status": "failed", "attempt": self.resume.attempt if self.resume else 0,
               "start": start}
        if placed is not None:
            row.update(placed_host=placed.host, wave=placed.wave, gpu_uuids=list(placed.gpu_uuids),
                       gpu_indices=list(placed.gpus), cpuset=placed.cpuset)
        return Launch(name, dataclasses.replace(resolved, placement=placed), row, runtime, start=start,
                       starts=self.config.study.starts)

    def _launch(self, launch: Launch) -> None:
        """Image, container, environment probe, readiness: the arm's engine up and answering."""
        name, row, runtime = launch.name, launch.row, launch.runtime
        arm = launch.arm
        row["image_ref"] = arm.image
        with self.timer.stage("image"):  # many hosts (run/arm/hosts.py): shipped to the arm's Docker host, pinned by id
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
        self.say(f"[{name}] ready at {handle.base_url} in {seconds:.1f} s")

    def _run_arm(self, launch: Launch, stop_behind: bool = False) -> None:
        """Its start that runs the protocol, then its later starts (study.starts); `stop_behind`: its last start
        stops while the next arm starts."""
        launch, started = self._early.pop(launch.name, (launch, None))  # an early start's launch, if any
        starts, resume = self.config.study.starts, self.resume
        later = list(range(1, starts)) if resume is None else resume.starts.get(launch.name, [])
        if resume is None or resume.groups[launch.name]:  # else only later starts are started again
            self._attempt(launch, lambda: self._protocol(launch, started), stop_behind and not later)
        for number in later:
            again = self._new_launch(launch.resolved, launch.runtime, launch.resolved.placement, number)
            self._attempt(again, functools.partial(self._later_start, again), stop_behind and number == later[-1])

    def _protocol(self, launch: Launch, started: Future[None] | None) -> None:
        name, row, runtime = launch.name, launch.row, launch.runtime
        if started is None:
            self._launch(launch)
        else:
            started.result()  # an early start's failure is this arm's, recorded in its row
        handle = launch.handle
        assert handle is not None and launch.probing is not None and launch.model is not None
        with self.timer.stage("fingerprint"):
            fingerprint = self._arm_fingerprint(launch, handle, launch.probing.result())
        fingerprint.update(image_source=launch.image_source, ran_on=hosts.ran_on(runtime))
        row.update(fingerprint_json=json.dumps(fingerprint, sort_keys=True),
                   matrix_key=matrix_key(launch.resolved.identity, fingerprint))
        self._prefetch.wait()
        self._stops.wait()  # the arm before has stopped: one engine serves at a time
        with self.timer.stage("requests"):
            sent = run_async(self._send(launch, handle))
        self.say(f"[{name}] {counted(sent, 'request')} done")

    def _later_start(self, launch: Launch) -> None:
        """A later start: ready, one request per prompt (run/send/starts.py), then stopped like the first."""
        self._launch(launch)
        assert launch.handle is not None and launch.model is not None
        launch.model.result()  # in its row, as the first start's
        self._stops.wait()
        sent = run_async(self._send(launch, launch.handle))
        self.say(f"{launch.label} {counted(sent, 'request')} done")

    def _attempt(self, launch: Launch, body: Callable[[], None], stop_behind: bool = False) -> None:
        """Run one start of an arm and record it: its `arms` row lands in every exit path; an OrchestratorError
        fails the arm (said, kept in `failed`), anything else is recorded and let through. `stop_behind`: its
        stop and row in a thread while the next arm starts, unless Ctrl-C or a bug ended it."""
        name, row, runtime = launch.name, launch.row, launch.runtime
        try:
            body()
            row["status"] = "completed"
        except OrchestratorError as exc:
            killed = "" if launch.handle is None else exits.killed(runtime, launch.handle, traits_of(
                self.config.runtime.kind).memory_limits)
            head, newline, rest = str(exc).partition("\n")  # the first line is the reason: the signal goes there
            row["error"] = f"{head}{killed}{newline}{rest}"
            if self._interrupted:  # its engine was removed under it (Ctrl-C while arms ran side by side)
                row["status"] = "interrupted"
            if name not in self.failed:
                self.failed.append(name)
            # short here (a traceback's last lines): the whole tail is in report.md, the root cause said at the end
            tail = getattr(exc, "log_tail", [])
            self.say(f"{launch.label} FAILED: {head or type(exc).__name__}{killed}"
                     + "".join(f"\n    {line}" for line in tail[-TERMINAL_TAIL:])
                     + (f"\n    ({len(tail)} log lines in report.md)" if len(tail) > TERMINAL_TAIL else ""))
        except BaseException as exc:  # Ctrl-C and bugs: record, clean up, then let it through
            row["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            row["error"] = f"{type(exc).__name__}: {exc}"
            stop_behind = False
            raise
        finally:
            if stop_behind and launch.handle is not None:
                self._stops.submit(functools.partial(self._finish, launch, "stop_behind_next_start"))
            else:
                self._finish(launch, "stop_and_logs")

    def _finish(self, launch: Launch, stage: str) -> None:
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
            with _writer(self.paths, "arms", launch.name, flush_rows=1) as arms:  # a part of its own, numbered on
                arms.append(row)  # the arm's row lands in every exit path

    def _before_group(self, running: str, group: list[protocol.Request]) -> None:
        """Overlapped starts: the next arm starts once this one is past its cold request and in a sequential
        phase; a concurrent batch waits until that start has ended, so no engine loads during a batch."""
        if self._upcoming is None:
            return
        if group[0].phase_kind is PhaseKind.concurrent:
            wait_all([future for _, future in self._early.values()])
        elif not group[0].cold and self._upcoming.name not in self._early:
            name = self._upcoming.name
            launch = self._new_launch(self._upcoming, self.runtime)
            launch.row["started_during"] = running
            self.say(f"[{name}] starting early, while {running} runs its sequential phases "
                     "(runtime.overlap_arm_starts)")
            self._early[name] = (launch, self._starter.submit(self._launch, launch))

    def _stop(self, launch: Launch, handle: Handle) -> None:
        name, row, runtime = launch.name, launch.row, launch.runtime
        try:
            if launch.sampler is not None:  # its last reading while the engine still runs
                row.update(launch.sampler.stop().row())
            row["exit_code"] = runtime.stop(handle, self.config.runtime.stop_timeout_s)
            if (reason := runtime.exit_reason(handle)) and reason not in (row.get("error") or ""):
                row["error"] = f"{row['error']}; {reason}" if row.get("error") else reason
            with _writer(self.paths, "logs", name, flush_rows=10_000) as logs:
                for seq, line in enumerate(runtime.logs(handle)):
                    logs.append({"run_id": self.run_id, "arm": name, "container_id": handle.id,
                                 "stream": line.stream, "seq": seq, "timestamp": line.timestamp,
                                 "text": line.text})
        finally:
            runtime.remove(handle)

    def _arm_fingerprint(self, launch: Launch, handle: Handle, probe: dict[str, Any]) -> dict[str, Any]:
        arm, runtime = launch.arm, launch.runtime
        engine = launch.resolved.profile  # the engine that answers: a stand-in's is the reference engine
        fingerprint = run_async(server_facts(runtime, handle, engine.endpoints))
        fingerprint["log_facts"] = log_facts((line.text for line in runtime.logs(handle)), engine.name)
        fingerprint["docker_host"] = arm.docker_host or self.config.runtime.docker_host or "local"
        fingerprint["probe"] = probe  # versions, GPU, env, from inside the arm with its own interpreter
        fingerprint["image_id"] = launch.resolved.identity
        assert launch.model is not None
        fingerprint["cell"] = arm_cell(arm.engine_args, arm.gpus, engine.name, *launch.model.result())
        return fingerprint

    def _context(self, launch: Launch) -> RunContext:
        return RunContext(self.config.study.name, self.run_id, launch.name, self.config.protocol.significant_digits,
                          self.resume.attempt if self.resume else 0, launch.start)

    async def _send(self, launch: Launch, handle: Handle) -> int:
        """The protocol (start 0), or a later start's one request per prompt (run/send/starts.py)."""
        name, arm, runtime, proto = launch.name, launch.arm, launch.runtime, self.config.protocol
        client = CompletionClient(handle.base_url, protocol.request_timeout_s(proto), transport=runtime.http_transport)
        try:
            sent: Mapping[str, str | list[int]] = self._prompts
            engine = launch.resolved.profile
            model = engine.model_field(arm.served_model_name)
            if proto.request.prompt_as is PromptAs.token_ids:
                sent = await protocol.token_ids(client, model, self._prompts, engine)
            if wanted := prompt_length.lengths(self.config.prompts):  # exactly N tokens (docs/onset.md)
                files = prompt_length.ArmTokenizer(runtime, handle, launch.resolved.interpreter,
                                                   engine.model(arm.engine_args, arm.command))
                sent = await prompt_length.exact(client, model, sent, wanted, engine, name, files)
            extra = dict(launch.resolved.request_extra)
            stop = None if proto.stop_after_divergences is None else StopRule(proto.stop_after_divergences)
            if launch.start:
                groups, stop = starts.requests(proto, model, sent, arm.endpoint, extra, engine), None
            else:
                groups = list(protocol.plan(proto, model, sent, arm.endpoint, extra, engine,
                                            phase_backgrounds(self.config)))
                if self.resume is not None:
                    groups = protocol.resent(groups, self.resume.groups[name], name, self.resume.attempt)
                self.progress.arm(name, dict(Counter(request.phase for group in groups for request in group)))
            if stop is not None and self.resume is not None:
                stop.observe(self.resume.recorded.get(name, []))
            fetch = digests.DigestFetch(self._context(launch), engine, self.paths)  # after each phase, and the last
            with _writer(self.paths, "responses", name,
                         on_row=fetch.noting(None if launch.start else self.progress.row)) as writer:
                paths = engine.endpoints.overridden(arm.health_path, arm.metrics_path)
                sender = ProtocolSender(self._context(launch), self._prompts, writer, paths.metrics, paths.health,
                                        lambda: runtime.exit_code(handle),
                                        lambda text: self.say(f"{launch.label} {text}"), engine,
                                        lambda group: None if launch.start else self._before_group(name, group),
                                        stop, lambda group: self.progress.ended(name, group[0].phase, len(group)),
                                        phase_over=fetch.fetch)
                done = await sender.send(client, groups)
            launch.row["digests_note"] = await fetch.fetch(client, lambda text: self.say(f"{launch.label} {text}"))
            return done
        finally:
            await client.aclose()


TERMINAL_TAIL = 5  # an arm's last log lines said on failure; report.md has the rest


def _writer(paths: RunPaths, table: str, part_prefix: str, **options: Any) -> TableWriter:
    """The record's writer, imported when first needed: pyarrow is imported while the first engine loads
    (run/prefetch.py), not before anything starts."""
    from orchestrator.record.tables import TableWriter

    return TableWriter(paths, table, part_prefix, **options)
