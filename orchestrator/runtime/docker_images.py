"""A Docker host's images beyond looking one up (runtime/docker.py): built from an arm's build context where the
host lacks it, a missing tag answered with the closest one the host has, and an image copied to another Docker
host (`docker save | docker load`, through ssh when that host is reached over ssh://) with its id checked there.
Each takes the SDK's client of the host(s) concerned; the SDK is imported by then (docker_sdk.py)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.errors import ImageError
from orchestrator.runtime.spec import BuildSpec, ImageInfo
from orchestrator.runtime.ssh import SshLink


def build(client: Any, ref: str, context: Path, spec: BuildSpec, absent: str) -> Any:
    """Build `ref` from `context` on the host; `absent` (why it was built) opens every error's sentence."""
    import docker.errors

    if not (context / spec.dockerfile).is_file():
        raise ImageError(f"{absent}, and it cannot be built: no {spec.dockerfile} in {context}", absent)
    try:
        image, _ = client.images.build(path=str(context), dockerfile=spec.dockerfile, tag=ref,
                                       buildargs=dict(spec.args), rm=True)
    except docker.errors.BuildError as exc:
        tail = [str(c.get("stream", c.get("error", ""))).rstrip() for c in exc.build_log][-20:]
        cause = " ".join(exc.msg.split()).rstrip(".")
        raise ImageError(f"{absent}, and building it from {context} failed: {cause}.\n" + "\n".join(tail),
                         absent) from exc
    return image


def closest(client: Any, ref: str) -> str:
    """' (the closest it has: 'TAG')' among the Docker host's tagged images: a typo names what was meant."""
    import docker.errors

    try:
        tags = [tag for image in client.images.list() for tag in image.tags]
    except docker.errors.APIError:
        return ""
    close = difflib.get_close_matches(ref, tags, n=1, cutoff=0.5)
    return f" (the closest it has: '{close[0]}')" if close else ""


def ship(image: ImageInfo, source: Any, source_host: str, to: Any, to_host: str, to_ssh: SshLink | None) -> int:
    """Copy `image` from the `source` client's host to the `to` client's (its `docker load` through `to_ssh` when
    set: OpenSSH carries an image faster than paramiko), tag it there as `image.ref`, and check that it has the
    same id there; returns the bytes sent."""
    import docker.errors

    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for chunk in source.api.get_image(image.id, chunk_size=1 << 20):
            sent += len(chunk)
            yield chunk

    try:
        if to_ssh:
            to_ssh.load(chunks())
        else:
            for _ in to.api.load_image(chunks()):
                pass
        shipped = to.images.get(image.id)
    except (docker.errors.APIError, docker.errors.ImageNotFound) as exc:
        raise ImageError(f"shipping image {image.ref} ({image.id[:19]}) from {source_host} to {to_host} "
                         f"failed: {exc}") from exc
    if shipped.id != image.id:
        raise ImageError(f"image {image.ref} has id {shipped.id} on {to_host}, not {image.id} as on {source_host}")
    repository, _, tag = image.ref.rpartition(":") if ":" in image.ref.split("/")[-1] else (image.ref, "", "")
    shipped.tag(repository, tag or None)
    return sent
