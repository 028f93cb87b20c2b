"""The environment block: what each arm really was (image and id, or a process's code identity; engine and
library versions; GPU, driver, CUDA; host; matrix key), the command that started it as the arms table
recorded it (the same rendering `orchestrator plan` prints), and the commands that re-run and reproduce the
study. From the record alone."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.engines import ENGINES
from orchestrator.engines.profile import PATH_FACTS
from orchestrator.record.recorded import ArmStart, Recorded


@dataclass
class ArmEnvironment:
    arm: str
    status: str
    identity: str  # docker image id, or process:sha256:... (the code identity)
    image_ref: str | None
    repo_digests: list[str]
    engine_version: str | None
    packages: dict[str, str]  # distribution -> version, as the arm's interpreter reported them
    python: str | None
    gpu: str | None  # "1 x NVIDIA H200 (sm 9.0), driver 570.1"; None: no GPU visible
    cuda: str | None
    os: str | None
    host: str  # the Docker host (local or its URL) or, for a process arm, the machine
    matrix_key: str | None
    command: str  # the equivalent `docker run` or command line
    started_during: str | None = None  # runtime.overlap_arm_starts: the arm it started beside
    # study.parallel_arms: the wave it ran in (arms of one wave ran at the same time) and where it was placed
    wave: int | None = None
    placement: str | None = None  # "local, GPU GPU-1f.., cores 0-3"
    probe_error: str | None = None  # the environment probe did not run: packages and python are unknown
    digests_note: str | None = None  # protocol.request.digests: flagged requests whose digests were not recorded
    # which code path ran, as its log states it (engines/profile.py PATH_FACTS): fact -> value
    path: dict[str, str] = field(default_factory=dict)


@dataclass
class Environment:
    arms: list[ArmEnvironment] = field(default_factory=list)
    host: str | None = None  # the machine the orchestrator ran on
    commands: dict[str, str] = field(default_factory=dict)  # what -> the exact command


def _engine_package(arm: ArmStart, packages: dict[str, str]) -> str | None:
    """Where the server states no version (transformers serve: no /version, no log line), its own
    distribution's, as the arm's probe found it installed: 'transformers 5.25.0'. The engine that answered
    (a stand-in's: the reference engine's)."""
    profile = ENGINES.get(arm.engine or "")
    own = profile.packages if profile else ()  # an engine this orchestrator does not know: none to offer
    return next((f"{name} {packages[name]}" for name in own if packages.get(name)), None)


def arm_environment(arm: ArmStart, label: str = "") -> ArmEnvironment:
    fingerprint = arm.fingerprint or {}
    probe = fingerprint.get("probe") or {}
    gpu = probe.get("gpu") or {}
    packages = probe.get("packages") or {}
    facts = fingerprint.get("log_facts") or {}
    version = facts.get("engine_version") or \
        (fingerprint.get("version") or {}).get("version") or _engine_package(arm, packages)
    gpu_text = None
    if gpu.get("count"):
        capability = f" (sm {gpu['capability']})" if gpu.get("capability") else ""
        driver = f", driver {gpu['driver']}" if gpu.get("driver") else ""
        gpu_text = f"{gpu['count']} x {gpu.get('name') or 'GPU'}{capability}{driver}"
    identity = arm.image_id or fingerprint.get("image_id") or (  # completed with none: imported (docs/import.md)
        "not recorded" if arm.status == "completed" else "unknown (the arm did not start)")
    host = fingerprint.get("docker_host") or "local"
    return ArmEnvironment(
        arm=label + arm.arm, status=arm.status or "unknown", identity=identity,
        image_ref=arm.image_ref, repo_digests=arm.image_repo_digests,
        engine_version=version, packages=dict(sorted(packages.items())),
        python=probe.get("python"), gpu=gpu_text, cuda=probe.get("cuda"), os=probe.get("os"),
        host=host, matrix_key=arm.matrix_key, command=arm.docker_run or "",
        started_during=arm.started_during, wave=arm.wave, placement=_placement(arm),
        probe_error=probe.get("error"), digests_note=arm.digests_note,
        path={name: facts[name] for name in PATH_FACTS if name in facts})


def _placement(arm: ArmStart) -> str | None:
    if arm.wave is None:
        return None
    parts = [arm.placed_host or "local"]
    if arm.gpu_uuids:
        parts.append("GPU " + ", ".join(arm.gpu_uuids))
    if arm.cpuset:
        parts.append(f"cores {arm.cpuset}")
    return ", ".join(parts)


def side_by_side(arms: list[ArmEnvironment]) -> str | None:
    """The report's line on which arms ran at the same time (study.parallel_arms), wave by wave, and where."""
    waves: dict[int, list[ArmEnvironment]] = {}
    for arm in arms:
        if arm.wave is not None:
            waves.setdefault(arm.wave, []).append(arm)
    if not waves:
        return None
    return "Placement (study.parallel_arms; the arms of a wave ran at the same time): " + "; ".join(
        f"wave {n}: " + ", ".join(f"{a.arm} ({a.placement})" for a in waves[n]) for n in sorted(waves)) + "."


def environment(recorded: Recorded) -> Environment:
    """Each arm's environment (the start that ran the protocol; analysis/starts.py has the others) and the
    commands that re-run, reproduce and re-make."""
    arms = [arm_environment(arm, run.label) for run in recorded.runs for arm in run.arms]
    several = len(recorded.runs) > 1
    commands = {}
    for run in recorded.runs:
        if run.meta.imported:  # another tool's output (docs/import.md): nothing here can run it again
            continue
        where = f" ({run.paths.root.name})" if several else ""
        run_dir = shlex.quote(_shown(run.paths.root))
        commands[f"re-run the study{where}"] = f"orchestrator run --from {run_dir}"
        commands[f"reproduce with the same images{where}"] = f"orchestrator reproduce {run_dir}"
    sources = " ".join(shlex.quote(_shown(run.paths.root)) for run in recorded.runs)
    target = f" --out {shlex.quote(_shown(recorded.out.root))}" if several else ""
    commands["re-make this report"] = f"orchestrator compare {sources}{target}"
    return Environment(arms=arms, host=recorded.meta.host, commands=commands)


def _shown(path: Path) -> str:
    """Relative to the working directory where it lies below it (the form a colleague types in a checkout)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def markdown_section(env: Environment) -> list[str]:
    out = ["## Environment", ""]
    if env.host:
        out += [f"Orchestrator host: {env.host}", ""]
    out += ["| arm | status | identity | engine | libraries | python | GPU | CUDA | host | matrix key |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for a in env.arms:
        image = f"{a.image_ref} = {a.identity}" if a.image_ref and a.image_ref != a.identity else a.identity
        if a.repo_digests:
            image += " (" + ", ".join(a.repo_digests) + ")"
        unread = "unknown" if a.probe_error else "-"  # never another interpreter's packages
        libraries = ", ".join(f"{k} {v}" for k, v in a.packages.items()) or unread
        out.append(f"| {a.arm} | {a.status} | {image} | {a.engine_version or '-'} | {libraries} | "
                   f"{a.python or unread} | {a.gpu or 'none'} | {a.cuda or '-'} | {a.host} | {a.matrix_key or '-'} |")
    unprobed = [f"{a.arm}: {a.probe_error}" for a in env.arms if a.probe_error]
    if unprobed:
        out += ["", "Environment probe not run or failed (libraries and python unknown): " + "; ".join(unprobed) + "."]
    if missing := [f"{a.arm}: {a.digests_note}" for a in env.arms if a.digests_note]:
        out += ["", "Digests not recorded (protocol.request.digests; run/send/digests.py): " + "; ".join(missing) + "."]
    if any(a.path for a in env.arms):
        out += ["", "Code path, as each arm's log states it (log facts; docs/guard.md): " + "; ".join(
            f"{a.arm}: " + (", ".join(f"{k} {v}" for k, v in a.path.items()) or "not stated") for a in env.arms) + "."]
    early = [f"{a.arm} started while {a.started_during} ran its sequential phases" for a in env.arms
             if a.started_during]
    if line := side_by_side(env.arms):
        out += ["", line]
    if early:
        out += ["", "Overlapped starts (runtime.overlap_arm_starts; never during a concurrent batch): "
                + "; ".join(early) + "."]
    out += ["", "Each arm as started (the equivalent command; `orchestrator plan` prints the same):", ""]
    for a in env.arms:
        out += [f"- {a.arm}:", "", "```", a.command or "(not recorded: the arm did not start)", "```", ""]
    out += ["Commands:", "", "```", *(f"# {what}\n{command}" for what, command in env.commands.items()), "```", ""]
    return out
