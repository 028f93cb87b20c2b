"""The `plan` verb: per arm the equivalent `docker run` (or command line), the requests its cells take and their
expected engine time (run/estimate.py), without starting anything."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from orchestrator.config import workload
from orchestrator.config.arms import Placement, ResolvedArm, resolve_arms, runtime_for
from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError, DockerUnavailable, ImageError, OrchestratorError, counted
from orchestrator.run import placement
from orchestrator.run.estimate import arm_lines, group_seconds
from orchestrator.run.send.protocol import request_timeout_s
from orchestrator.runtime.spec import BuildSpec, ContainerSpec, run_labels
from orchestrator.runtime.traits import traits_of

PLAN_RUN_ID = "RUN_ID"


def arm_specs(config: Config, arms: Mapping[str, ResolvedArm], run_root: Path, run_id: str,
              images: dict[str, str] | None = None) -> dict[str, ContainerSpec]:
    """The container spec of every arm; `images` maps arm -> resolved image id (default: the ref)."""
    labels = run_labels(run_id, study=config.study.name)
    specs = {}
    for name, resolved in arms.items():
        arm = resolved.arm
        image = (images or {}).get(name, arm.image)
        # Secrets appear by name only (as `-e NAME`), never with a value.
        specs[name] = resolved.spec(image, labels, {k: "" for k in arm.secret_env}, scratch_root=run_root / "scratch")
    return specs


def render(config: Config, like: Path | None = None, arms: Mapping[str, ResolvedArm] | None = None) -> str:
    """`like`: an earlier run of the same study, whose record gives the expected engine time; `arms`: as
    `preflight` resolved them (made here for a caller that has only the config)."""
    arms = resolve_arms(config) if arms is None else arms
    lines = [f"# study {config.study.name}: {counted(len(config.arms), 'arm')}, protocol {config.protocol.name}, "
             f"prompts {config.prompts.name}"]
    derived = "" if config.protocol.request_timeout_s is not None else \
        " (derived from the largest batch and max_tokens; set protocol.request_timeout_s to fix it)"
    lines.append(f"# requests time out after {request_timeout_s(config.protocol):g} s{derived}")
    lines += [w.sentence() for w in workload.workloads(config)]
    if config.study.starts > 1:
        n = config.study.starts
        lines.append(f"# study.starts={n}: each arm is started {n} times; the first runs the protocol, each later "
                     "start is a fresh engine sent one request per prompt, then stopped")
    if stand_in := next((resolved.stand_in_image for resolved in arms.values()), None):
        lines.append(f"# stand-in: every arm runs on {stand_in} (no GPUs, no host mounts)")
    image_ids = traits_of(config.runtime.kind).image_ids
    seconds = None if like is None else group_seconds(like, config.study.name)
    waves, lines_of_waves = planned_waves(config, arms)
    lines += lines_of_waves
    placed = {p.arm: p for wave in waves for p in wave}  # the command as the run gives it: the wave's cores, GPUs
    arms = {name: dataclasses.replace(arm, placement=placed.get(name)) for name, arm in arms.items()}
    for name, spec in arm_specs(config, arms, Path("RUN_DIR"), PLAN_RUN_ID).items():
        arm = arms[name].declared
        pinned = ("a local process: its engine's version is the one its interpreter has, recorded at run time"
                  if not image_ids else "the image is pinned to its id at run time")
        lines += [f"# arm {name}: {arm.description or arm.image}; {pinned}", *arm_lines(config, name, seconds),
                  spec.equivalent_command(not image_ids)]
    return "\n".join(lines) + "\n"


def absent_images(config: Config, arms: Mapping[str, ResolvedArm]) -> list[str]:
    """A warning per arm whose image is not on the Docker host, in the words `check` and `run` use (the closest
    image it has), found without building anything. A plan is made for other hosts too: it is not refused, and
    no Docker host here means nothing is looked up."""
    if not traits_of(config.runtime.kind).image_ids:
        return []
    try:
        runtime = runtime_for(config.runtime)
    except DockerUnavailable:
        return []
    found = []
    for name, resolved in arms.items():
        arm = resolved.arm
        if arm.docker_host is not None:
            continue
        try:
            runtime.resolve_image(arm.image, BuildSpec())  # no build context: looked up, never built
        except ImageError as exc:
            fate = f"`run` tries to build it from {arm.build.context}" if arm.build.context else \
                "`check` and `run` refuse it" + (f"; for this arm: {arm.build.hint}" if arm.build.hint else "")
            found.append(f"arm '{name}': {exc.absent or str(exc).splitlines()[0]}; {fate}")
    return found


def planned_waves(config: Config, arms: Mapping[str, ResolvedArm]) -> tuple[list[list[Placement]], list[str]]:
    """study.parallel_arms (or arms that ask for cores or a GPU count): which arms run at the same time, where,
    from the hosts' inventories; and the plan's lines that say so."""
    if not placement.uses_placement(config):
        return [], []
    try:
        waves = placement.waves(config, lambda host: runtime_for(
            config.runtime, None if host == placement.LOCAL else host).inventory(), resolved=arms)
    except OrchestratorError as exc:
        if isinstance(exc, ConfigError):
            raise
        return [], [f"# waves: not known, the hosts' inventories cannot be read ({str(exc).splitlines()[0]})"]
    return waves, [f"# study.parallel_arms={config.study.parallel_arms}: {counted(len(waves), 'wave')}",
                   *placement.render_waves(waves)]
