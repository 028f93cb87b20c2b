"""What a run will do, without doing it: per arm the equivalent `docker run` command.

Also the stand-in: `stand_in=IMAGE` runs every arm on IMAGE (the reference engine accepts vLLM's
flags), without GPUs, host mounts or host IPC, so a vLLM study's whole path runs where no GPU is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orchestrator.runtime.base import LABEL_NS, ContainerSpec
from orchestrator.schema import ArmConfig, BuildConfig, Config, RuntimeKind

PLAN_RUN_ID = "RUN_ID"


def effective_arm(arm: ArmConfig, stand_in: str | None) -> ArmConfig:
    if not stand_in:
        return arm
    return dataclasses.replace(arm, image=stand_in, build=BuildConfig(), gpus=None, volumes=[], ipc_mode=None,
                               shm_size=None, network_host=False, privileged=False, cap_add=[])


def arm_specs(config: Config, run_root: Path, run_id: str, images: dict[str, str] | None = None
              ) -> dict[str, ContainerSpec]:
    """The container spec of every arm; `images` maps arm -> resolved image id (default: the ref)."""
    labels = {f"{LABEL_NS}.run": run_id, f"{LABEL_NS}.study": config.study.name}
    specs = {}
    for name, original in config.arms.items():
        arm = effective_arm(original, config.stand_in)
        image = (images or {}).get(name, arm.image)
        # Secrets appear by name only (as `-e NAME`), never with a value.
        specs[name] = ContainerSpec.for_arm(name, arm, image, labels, {k: "" for k in arm.secret_env},
                                            scratch_root=run_root / "scratch")
    return specs


def render(config: Config) -> str:
    lines = [f"# study {config.study.name}: {len(config.arms)} arm(s), protocol {config.protocol.name}, "
             f"prompts {config.prompts.name}"]
    if config.stand_in:
        lines.append(f"# stand-in: every arm runs on {config.stand_in} (no GPUs, no host mounts)")
    process = config.runtime.kind is RuntimeKind.process
    for name, spec in arm_specs(config, Path("RUN_DIR"), PLAN_RUN_ID).items():
        arm = config.arms[name]
        pinned = "a local process" if process else "the image is pinned to its id at run time"
        lines += [f"# arm {name}: {arm.description or arm.image}; {pinned}", spec.equivalent_command(process)]
    return "\n".join(lines) + "\n"
