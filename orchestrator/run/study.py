"""One study run: every arm in order (start, wait ready, protocol, stop), recorded as it goes.

With `study.starts: N` each arm is started N - 1 more times right after (in its thread, its wave): each a fresh
engine of the same spec, waited ready, sent one request per prompt, stopped (run/send/starts.py); a start that fails
fails the arm (exit 4), and the next start still runs.

With `runtime.overlap_arm_starts` the next arm is started while the current one runs its sequential phases
(the guard has refused arms that share a device, a cache or a port); before any concurrent batch the current
arm waits until that start has ended, so nothing loads during a batch."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all

from orchestrator.config import resolve_prompts
from orchestrator.config.arms import Placement, ResolvedArm, resolve_arms, runtime_for
from orchestrator.config.schema import Config, PhaseKind
from orchestrator.errors import OrchestratorError, counted
from orchestrator.interrupts import run_async
from orchestrator.record.paths import RunPaths
from orchestrator.run import placement
from orchestrator.run.arm.launch import Launch, ResumePlan
from orchestrator.run.arm.lifecycle import ArmEngines
from orchestrator.run.arm.stop_behind import StopsBehind, may_stop_behind
from orchestrator.run.prefetch import Prefetch
from orchestrator.run.progress import Progress
from orchestrator.run.send import protocol
from orchestrator.run.send.arm_requests import StudySend, send_arm
from orchestrator.run.timings import StageTimer
from orchestrator.runtime.spec import Runtime, run_labels
from orchestrator.runtime.traits import traits_of


class StudyRunner:
    def __init__(self, config: Config, paths: RunPaths, run_id: str, runtime: Runtime,
                 host_env: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None,
                 resume: ResumePlan | None = None, arms: Mapping[str, ResolvedArm] | None = None,
                 timer: StageTimer | None = None) -> None:
        """`arms`: each arm as `refusals` resolved it (config/arms.py; made here for a caller with the config)."""
        self.config = config
        self.arms = dict(resolve_arms(config) if arms is None else arms)
        self.paths = paths.make()
        self.run_id = run_id
        self.runtime = self.default_runtime = runtime
        self._remote: dict[str, Runtime] = {}
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self.progress = Progress(self.say, live=None if say is None else False)  # bars only on a terminal
        self.failed: list[str] = []
        self.timer = timer or StageTimer()
        self.resume = resume
        self.engines = ArmEngines(config, self.paths, run_id, runtime, os.environ if host_env is None else host_env,
                                  self.say, self.timer, resume.attempt if resume else 0)
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="early-start")
        self._prefetch = Prefetch()  # imports needed once the first engine answers, made while it loads
        self._upcoming: ResolvedArm | None = None  # the arm that may start early, while one runs
        self._early: dict[str, tuple[Launch, Future[None]]] = {}
        self._stops = StopsBehind()  # an arm's stop while the next one starts (arm/stop_behind.py)
        self._interrupted = False  # Ctrl-C while arms ran side by side: their failures are the interruption
        self._send: StudySend | None = None

    def run(self) -> None:
        self._prefetch.start()
        self._send = StudySend(self.config, self.paths, self.run_id,
                               resolve_prompts(self.config.prompts, self.config.config_dirs), self.progress,
                               self.resume, self.say, self._before_group)
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
                    self._run_arm(self.engines.new_launch(arm, self.runtime), stop_behind=behind)
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
            launches = [self.engines.new_launch(self.arms[p.arm], self._runtime_on(p.host), p) for p in wave]
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
        self.engines.close()
        self._starter.shutdown(wait=False, cancel_futures=True)
        for runtime in (self.default_runtime, *self._remote.values()):
            runtime.cleanup(run_labels(self.run_id))

    def _run_arm(self, launch: Launch, stop_behind: bool = False) -> None:
        """Its start that runs the protocol, then its later starts (study.starts); `stop_behind`: its last start
        stops while the next arm starts."""
        launch, started = self._early.pop(launch.name, (launch, None))  # an early start's launch, if any
        starts, resume = self.config.study.starts, self.resume
        later = list(range(1, starts)) if resume is None else resume.starts.get(launch.name, [])
        if resume is None or resume.groups[launch.name]:  # else only later starts are started again
            self._attempt(launch, lambda: self._protocol(launch, started), stop_behind and not later)
        for number in later:
            again = self.engines.new_launch(launch.resolved, launch.runtime, launch.resolved.placement, number)
            self._attempt(again, functools.partial(self._later_start, again), stop_behind and number == later[-1])

    def _protocol(self, launch: Launch, started: Future[None] | None) -> None:
        if started is None:
            self.engines.launch(launch)
        else:
            started.result()  # an early start's failure is this arm's, recorded in its row
        self.engines.fingerprint(launch)
        self._prefetch.wait()
        self._stops.wait()  # the arm before has stopped: one engine serves at a time
        with self.timer.stage("requests"):
            self._send_requests(launch)

    def _later_start(self, launch: Launch) -> None:
        """A later start: ready, one request per prompt (send/starts.py), then stopped like the first."""
        self.engines.launch(launch)
        assert launch.model is not None
        launch.model.result()  # in its row, as the first start's
        self._stops.wait()
        self._send_requests(launch)

    def _send_requests(self, launch: Launch) -> None:
        assert self._send is not None and launch.handle is not None
        sent = run_async(send_arm(self._send, launch, launch.handle))
        self.say(f"{launch.label} {counted(sent, 'request')} done")

    def _attempt(self, launch: Launch, body: Callable[[], None], stop_behind: bool = False) -> None:
        """Run one start of an arm and record it: its `arms` row lands in every exit path; an OrchestratorError
        fails the arm (said, kept in `failed`), anything else is recorded and let through. `stop_behind`: its
        stop and row in a thread while the next arm starts, unless Ctrl-C or a bug ended it."""
        try:
            body()
            launch.row["status"] = "completed"
        except OrchestratorError as exc:
            self.engines.failed(launch, exc, self._interrupted)
            if launch.name not in self.failed:
                self.failed.append(launch.name)
        except BaseException as exc:  # Ctrl-C and bugs: record, clean up, then let it through
            launch.row["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            launch.row["error"] = f"{type(exc).__name__}: {exc}"
            stop_behind = False
            raise
        finally:
            if stop_behind and launch.handle is not None:
                self._stops.submit(functools.partial(self.engines.finish, launch, "stop_behind_next_start"))
            else:
                self.engines.finish(launch, "stop_and_logs")

    def _before_group(self, running: str, group: list[protocol.Request]) -> None:
        """Overlapped starts: the next arm starts once this one is past its cold request and in a sequential
        phase; a concurrent batch waits until that start has ended, so no engine loads during a batch."""
        if self._upcoming is None:
            return
        if group[0].phase_kind is PhaseKind.concurrent:
            wait_all([future for _, future in self._early.values()])
        elif not group[0].cold and self._upcoming.name not in self._early:
            name = self._upcoming.name
            launch = self.engines.new_launch(self._upcoming, self.runtime)
            launch.row["started_during"] = running
            self.say(f"[{name}] starting early, while {running} runs its sequential phases "
                     "(runtime.overlap_arm_starts)")
            self._early[name] = (launch, self._starter.submit(self.engines.launch, launch))
