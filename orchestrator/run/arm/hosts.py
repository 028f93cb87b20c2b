"""Images on many hosts: an arm on another Docker host (`docker_host`) runs the image the study's own
Docker host has, shipped there (save/load over the link) and pinned by its id, so every arm of a study runs
what the study resolved, whichever host runs it. Where each arm's image came from goes into its
fingerprint (`image_source`)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from orchestrator.errors import ImageError
from orchestrator.runtime.spec import BuildSpec, ImageInfo, Runtime


def ran_on(runtime: Runtime) -> dict[str, Any]:
    """Which machine ran the arm: the Docker daemon's host name (the far host's, for an ssh:// host), where the
    orchestrator ran, and the SLURM job it ran in (a sweep on a cluster), if any."""
    here = socket.gethostname()
    env = os.environ
    job = (f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}" if env.get("SLURM_ARRAY_TASK_ID")
           else env.get("SLURM_JOB_ID"))
    return {"docker_host": runtime.host,
            "engine_host": runtime.host_name(),
            "orchestrator_host": here, "slurm_job": job, "slurm_node": env.get("SLURMD_NODENAME")}


def resolve_image(runtime: Runtime, study_runtime: Runtime, ref: str,
                  build: BuildSpec) -> tuple[ImageInfo, dict[str, Any]]:
    """The arm's image on the arm's Docker host, and where it came from: present there, built there, or (an arm
    on another host) shipped from the study's host when that one has it and the arm's has not its id."""
    host = runtime.host
    if not runtime.traits.image_ids:  # processes: the code identity is the image
        return runtime.resolve_image(ref, build), {"host": host}
    if runtime is not study_runtime and study_runtime.traits.ships_images:
        try:
            local = study_runtime.resolve_image(ref, BuildSpec())  # present there; never builds
        except ImageError:
            local = None
        if local is not None:
            try:
                runtime.resolve_image(local.id, BuildSpec())
                return local, {"host": host, "how": "present", "same_id_as": study_runtime.host}
            except ImageError:
                started = time.monotonic()
                sent = study_runtime.ship_image(local, runtime)
                return local, {"host": host, "how": "shipped", "from": study_runtime.host, "bytes": sent,
                               "seconds": round(time.monotonic() - started, 1)}
    try:
        return runtime.resolve_image(ref, BuildSpec()), {"host": host, "how": "present"}
    except ImageError:
        if not build.context:
            raise
    return runtime.resolve_image(ref, build), {"host": host, "how": "built", "context": build.context.name}
