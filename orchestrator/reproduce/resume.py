"""`orchestrator run --resume RUN_DIR`: finish a run that was interrupted, killed, or lost an engine, in the
same run dir. What has a good row is kept; every request without a row is sent, and every group (a sequential
request, a concurrent batch or a load window, whole) of an arm that did not complete is sent again if it holds
an error row, or a request whose digests were not fetched (protocol.request.digests); each later start
(study.starts) that did not complete is started again. New rows carry `attempt` + 1 and the same `request_id`
(docs/conventions.md); readers take the latest attempt, so every request of the protocol ends with exactly one
row that counts. A restarted arm answers a new cold request first, recorded as cold.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.analysis.stopping import SIGNATURE_COLUMNS, StopRule
from orchestrator.config.arms import ResolvedArm, resolve_arms
from orchestrator.config.background import phase_backgrounds
from orchestrator.config.compose import resolve_prompts
from orchestrator.config.schema import Config
from orchestrator.console import Outcome, note
from orchestrator.errors import counted, noun
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import read_run
from orchestrator.record.tables import read_table
from orchestrator.reproduce.rerun import REPRODUCE_ALLOW, load_config
from orchestrator.run.arm.launch import ResumePlan
from orchestrator.run.send import protocol
from orchestrator.run.send.extension import EXTENSION_COLUMNS, WarmupExtension
from orchestrator.run.send.series import SERIES_COLUMNS, SeriesRule


def resume_plan(typed: Config, paths: RunPaths, arms: Mapping[str, ResolvedArm] | None = None) -> ResumePlan:
    """Per arm (`arms`: as config/arms.py resolved them, made here for a caller that has only the config), the
    group ids to send; arms with nothing to send are left out. With
    protocol.stop_after_divergences, a cell whose recorded rows already hold its divergences sends nothing more
    (its requests were never sent, so they have no row), and the others resume counting from their rows."""
    series = SeriesRule(typed.protocol)  # a series to saturation: the points after its stop are not sent
    extension = WarmupExtension(typed.protocol)  # a warm-up extended until steady: the windows it did not need
    rules = [rule for rule in (series, extension) if rule.loads]
    responses = read_table(paths, "responses", list(dict.fromkeys(
        ["arm", "request_id", "error", "attempt", "prompt_id", "phase", "role", "http_status", *SIGNATURE_COLUMNS,
         *(SERIES_COLUMNS if series.loads else ()), *(EXTENSION_COLUMNS if extension.loads else ())]))).to_pylist()
    digested = {(r["request_id"], r["attempt"]) for r in read_table(paths, "digests", ["request_id", "attempt"])
                .to_pylist()} if typed.protocol.request.digests else set()
    run = read_run(paths)
    status = {arm.arm: arm.status for arm in run.arms}  # the start that ran the protocol
    started = {(arm.arm, arm.start) for arm in run.starts if arm.status == "completed" and arm.start}
    rows = {row["request_id"]: row for row in responses if row["request_id"]}
    # past every attempt either table holds: a resume interrupted before its first answer left an arms row only
    attempt = max([*(row["attempt"] or 0 for row in responses), *(arm.attempt for arm in run.starts)], default=0) + 1
    prompts = resolve_prompts(typed.prompts, typed.config_dirs)
    groups: dict[str, set[str]] = {}
    recorded_by_arm: dict[str, list[dict[str, Any]]] = {}
    starts: dict[str, list[int]] = {}
    k = typed.protocol.stop_after_divergences
    for name, resolved in (resolve_arms(typed) if arms is None else arms).items():
        arm = resolved.arm
        if later := [s for s in range(1, typed.study.starts) if (name, s) not in started]:
            starts[name] = later  # study.starts: each later start that did not complete is started again
            groups.setdefault(name, set())
        completed = status.get(name) == "completed"
        stop = None if k is None else StopRule(k)
        if stop is not None or rules:
            recorded_by_arm[name] = [row for row in rows.values() if row["arm"] == name]
            for rule in (stop, *rules):
                if rule is not None:
                    rule.observe(recorded_by_arm[name])
        for group in protocol.plan(typed.protocol, arm.served_model_name, prompts, arm.endpoint,
                                   dict(resolved.request_extra), background=phase_backgrounds(typed)):
            if stop is not None and group[0].role == protocol.MEASURED and stop.stopped(group[0].prompt_id,
                                                                                        group[0].phase):
                continue
            if series.ended(group[0].phase) is not None:
                continue
            if group[0].window is not None and extension.wanted(group[0].phase, group[0].window.index) is False:
                continue
            recorded = [rows.get(request.request_id(name)) for request in group]
            if any(r is None for r in recorded) or (not completed and any(
                    r["error"] or _undigested(request, r, digested) for request, r in zip(group, recorded, strict=True)
                    if r is not None)):
                groups.setdefault(name, set()).add(group[0].group_id(name))
    return ResumePlan(attempt, groups, {arm: rows for arm, rows in recorded_by_arm.items() if arm in groups}, starts)


def _undigested(request: protocol.Request, row: dict[str, Any], digested: set[tuple[str, int]]) -> bool:
    """A request flagged for its digests, answered, whose digests the record lacks: the run stopped before or
    while they were fetched. They lived in the engine that answered, so it is sent again (with its group: its
    digests depend on its batch)."""
    return request.body.get(protocol.DIGEST_FIELD) is True and row["http_status"] == 200 and \
        (row["request_id"], row["attempt"] or 0) not in digested


def resume(run_dir: Path, allow: list[str]) -> Outcome:
    from orchestrator.run.execute import execute_study

    paths = RunPaths(run_dir)
    how_to_allow = REPRODUCE_ALLOW.replace("reproduce", "run --resume")
    typed = load_config(paths, allow, how_to_allow)
    plan = resume_plan(typed, paths)
    if not plan.groups:
        return note(f"{paths.root}: every request of the protocol has a row; nothing to resume")
    again = {arm: f", {noun(len(starts), 'start')} {', '.join(str(s + 1) for s in starts)}"
             for arm, starts in plan.starts.items()}
    todo = ", ".join(f"{arm}: {counted(len(ids), 'group')}{again.get(arm, '')}" for arm, ids in plan.groups.items())
    print(f"resuming {paths.root} (attempt {plan.attempt}): {todo}", file=sys.stderr)  # before it starts
    return execute_study(typed, paths, allow, how_to_allow, resume=plan)
