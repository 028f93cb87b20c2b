"""What a runtime can do, said once per runtime: run/, guard/ and config/ ask these traits, never the kind's
name (tests/unit/test_runtime_traits.py scans for such a branch; tests/contract checks each trait against what
the runtime does). A config has only the kind's name: `traits_of` answers without starting anything."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum


class IdentityKind(str, Enum):
    image = "image"  # an image's content id (sha256:...): what a container runs
    code = "code"  # a code identity of what a process runs ("process:sha256:...", docs/conventions.md)


CODE_PREFIX = "process:"  # how a code identity is written (record/identity.py reads it)


@dataclass(frozen=True)
class Traits:
    isolates_filesystem: bool  # each server has a filesystem, network and devices of its own (no host file seen)
    image_ids: bool  # `resolve_image` answers an image present or built there, by its content id
    ships_images: bool  # `ship_image` copies an image to another host of its kind: arms may run on many hosts
    memory_limits: bool  # a server's memory limit is enforced and a kill for memory reported (`exit_reason`)
    own_cgroup: bool  # a server runs outside the orchestrator's cgroup (a SLURM job's GPUs do not bind it)
    identity_kind: IdentityKind  # what `resolve_image(...).id` is


DOCKER = Traits(isolates_filesystem=True, image_ids=True, ships_images=True, memory_limits=True, own_cgroup=True,
                identity_kind=IdentityKind.image)
PROCESS = Traits(isolates_filesystem=False, image_ids=False, ships_images=False, memory_limits=False,
                 own_cgroup=False, identity_kind=IdentityKind.code)
FAKE = Traits(isolates_filesystem=False, image_ids=True, ships_images=False, memory_limits=False, own_cgroup=False,
              identity_kind=IdentityKind.image)  # in-process servers: the host's filesystem, no limits
BUILT_IN = {"docker": DOCKER, "process": PROCESS}  # by the config's name (`runtime.kind`)


def traits_of(kind: str) -> Traits:
    """The traits of the runtime a config names: a built-in one, or the class a "module:Class" kind names."""
    if kind in BUILT_IN:
        return BUILT_IN[kind]
    traits = getattr(runtime_class(kind), "traits", None)
    if not isinstance(traits, Traits):
        raise ValueError(f"{kind!r}: its class has no `traits` (runtime/traits.py Traits)")
    return traits


def runtime_class(kind: str) -> type:
    """The class a "module:Class" kind names (a runtime outside runtime/); ValueError says why there is none."""
    module, _, name = kind.partition(":")
    if not module or not name:
        raise ValueError(f"{kind!r} is neither a built-in runtime ({', '.join(BUILT_IN)}) nor module:Class")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{kind!r}: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, type):
        raise ValueError(f"{kind!r} names a {type(found).__name__}, not a class")
    return found


def kind_running(identity: IdentityKind) -> str:
    """The built-in runtime whose servers have identities of this kind (a recorded arm run again)."""
    return next(kind for kind, traits in BUILT_IN.items() if traits.identity_kind is identity)
