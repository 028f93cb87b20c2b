"""What a recorded identity (an arms row's `image_id`) is: the one reader of its form. runtime/process.py
writes a code identity as "process:sha256:..."; an image id is "sha256:..." (tests/contract checks that each
runtime's identities read as the kind its traits say)."""

from __future__ import annotations

CODE = "code"  # a process arm's code identity: its interpreter's distributions and its source
IMAGE = "image"  # an image's content id
PREFIX = "process:"  # before a code identity's digest, as runtime/process.py records it


def identity_kind(identity: str) -> str:
    """CODE or IMAGE (the values of runtime.traits.IdentityKind)."""
    return CODE if identity.startswith(PREFIX) else IMAGE
