"""What one start of an arm sends, and its rows: the protocol's groups (its first start; `run --resume`: those
not answered yet) or a later start's one request per prompt (send/starts.py), in the prompts as the arm's
engine takes them (token ids, exact lengths), through `ProtocolSender`, with the activation digests fetched
after each phase and the progress told of each row."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.analysis import decode_prefill
from orchestrator.analysis.stopping import StopRule
from orchestrator.config.background import phase_backgrounds
from orchestrator.config.schema import Config, Endpoint, PromptAs
from orchestrator.record.paths import RunPaths
from orchestrator.run.arm.launch import Launch, ResumePlan
from orchestrator.run.prefetch import table_writer
from orchestrator.run.progress import Progress
from orchestrator.run.send import digests, prompt_length, protocol, rescore, starts
from orchestrator.run.send.extension import WarmupExtension
from orchestrator.run.send.flush import PrefixFlush
from orchestrator.run.send.sender import GroupRule, ProtocolSender, RunContext, Server
from orchestrator.run.send.series import SeriesRule
from orchestrator.run.wire.client import CompletionClient
from orchestrator.runtime.spec import Handle


@dataclass(frozen=True)
class StudySend:
    """What every arm's sending shares: the study, its record, its prompts, its progress, what is resumed, and
    `before_group(arm, group)`, told before each group of an arm's first start (overlapped starts, study.py)."""

    config: Config
    paths: RunPaths
    run_id: str
    prompts: Mapping[str, str]
    progress: Progress
    resume: ResumePlan | None
    say: Callable[[str], None]
    before_group: Callable[[str, list[protocol.Request]], None]

    def context(self, launch: Launch) -> RunContext:
        return RunContext(self.config.study.name, self.run_id, launch.name, self.config.protocol.significant_digits,
                          self.resume.attempt if self.resume else 0, launch.start)


class _Hooks:
    """The sender's hooks for one start of an arm (send/sender.py's SendHooks)."""

    def __init__(self, study: StudySend, launch: Launch, fetch: digests.DigestFetch) -> None:
        self.study, self.launch, self.fetch = study, launch, fetch

    def say(self, text: str) -> None:
        self.study.say(f"{self.launch.label} {text}")

    def before_group(self, group: list[protocol.Request]) -> None:
        if not self.launch.start:
            self.study.before_group(self.launch.name, group)

    def skipped(self, group: list[protocol.Request], why: str) -> None:
        self.study.progress.ended(self.launch.name, group[0].phase, len(group), why)

    async def phase_over(self, client: CompletionClient) -> None:
        await self.fetch.fetch(client, self.say)


async def send_arm(study: StudySend, launch: Launch, handle: Handle) -> int:
    """Its requests sent and recorded, one `responses` row each; returns how many were sent."""
    name, arm, runtime, proto = launch.name, launch.arm, launch.runtime, study.config.protocol
    client = CompletionClient(handle.base_url, protocol.request_timeout_s(proto), transport=runtime.http_transport)
    try:
        sent: Mapping[str, str | list[int]] = study.prompts
        engine = launch.resolved.profile
        model = engine.model_field(arm.served_model_name)
        if proto.request.prompt_as is PromptAs.token_ids:
            sent = await protocol.token_ids(client, model, study.prompts, engine)
        if wanted := prompt_length.lengths(study.config.prompts):  # exactly N tokens (docs/onset.md)
            files = prompt_length.ArmTokenizer(runtime, handle, launch.resolved.interpreter,
                                               engine.model(arm.engine_args, arm.command))
            sent = await prompt_length.exact(client, model, sent, wanted, engine, name, files)
        extra = dict(launch.resolved.request_extra)
        # protocol.rescore: the distinct answers, re-scored after the phases (send/rescore.py), each answer with its
        # token ids (vLLM's field, the reference and hooked engines': the templates of the reference engine omit it)
        answers = rescore.Answers() if proto.rescore and not launch.start and decode_prefill.unobservable(
            engine, (arm.endpoint or proto.endpoint) is Endpoint.chat) is None else None
        extra = {**rescore.ASKED, **extra} if answers is not None else extra
        stop = None if proto.stop_after_divergences is None else StopRule(proto.stop_after_divergences)
        if launch.start:
            groups, stop = starts.requests(proto, model, sent, arm.endpoint, extra, engine), None
        else:
            groups = list(protocol.plan(proto, model, sent, arm.endpoint, extra, engine,
                                        phase_backgrounds(study.config)))
            if study.resume is not None:
                groups = protocol.resent(groups, study.resume.groups[name], name, study.resume.attempt)
            study.progress.arm(name, dict(Counter(request.phase for group in groups for request in group)))
        # a series to saturation: its rates, its stop; a warm-up extended until steady: its further windows
        rules: tuple[GroupRule, ...] = () if launch.start else (SeriesRule(proto), WarmupExtension(proto),
                                                                 *([answers] if answers else []))
        if study.resume is not None:
            for rule in (r for r in (stop, *rules) if r is not None):
                rule.observe(study.resume.recorded.get(name, []))
        fetch = digests.DigestFetch(study.context(launch), engine, study.paths)  # after each phase, and the last
        hooks = _Hooks(study, launch, fetch)
        paths = engine.endpoints.overridden(arm.health_path, arm.metrics_path)
        server = Server(engine, paths.health, paths.metrics, lambda: runtime.exit_code(handle))
        with table_writer(study.paths, "responses", name,
                          on_row=fetch.noting(None if launch.start else study.progress.row)) as writer:
            flush = PrefixFlush(proto.flush_prefix_cache, engine.endpoints.reset_prefix_cache)
            done = await ProtocolSender(study.context(launch), study.prompts, writer, server, hooks, stop,
                                        rules, flush).send(client, groups)
            if answers is not None and answers.seen:
                again = await rescore.requests(client, answers, sent, proto, model, engine, extra)
                study.progress.arm(name, {rescore.RESCORE: len(again)})
                hooks.say(f"re-scoring {len(again)} distinct answers as prompts (protocol.rescore)")
                done += await ProtocolSender(study.context(launch), study.prompts, writer, server,
                                             hooks).send(client, again)
        launch.row["digests_note"] = await fetch.fetch(client, hooks.say)
        return done
    finally:
        await client.aclose()
