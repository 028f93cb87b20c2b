"""Caches two arms share without saying so. A tuned kernel, a compiled graph or a downloaded file written by
one arm and read by the next makes the second arm's result depend on the first, so every way a cache
location can be set is followed to the host path it lands on: an environment variable, an engine argument,
a writable mount, and (process arms share one filesystem) a cache variable inherited from the host.

A path inside a container's own filesystem is private unless mounted. A process arm gets private cache
dirs by default (runtime/process.py `PRIVATE_CACHE_ENV`), as a container would. Sharing through a scratch
dir with `share:` is declared, not hidden: guard/declared.py checks those. Pure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import combinations
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from orchestrator.config.catalog import line
from orchestrator.engines import ENGINES, profile_for
from orchestrator.runtime.process import PRIVATE_CACHE_ENV
from orchestrator.runtime.traits import traits_of

if TYPE_CHECKING:
    from orchestrator.config.schema import ArmConfig, Config

# Environment variables that name a cache dir of the libraries under any engine, and the kind of cache each
# holds; an engine's own (its flags too) are its profile's (engines/).
LIBRARY_CACHE_ENV = {
    "FLASHINFER_WORKSPACE_BASE": "flashinfer", "TORCHINDUCTOR_CACHE_DIR": "torch_inductor",
    "TRITON_CACHE_DIR": "triton", "HF_HOME": "hugging_face", "HF_HUB_CACHE": "hugging_face",
    "TRANSFORMERS_CACHE": "hugging_face", "XDG_CACHE_HOME": "xdg", "CUDA_CACHE_PATH": "cuda_compile",
}
KINDS = tuple(sorted({*LIBRARY_CACHE_ENV.values(), "mount",
                      *(kind for p in ENGINES.values() for kind in (*p.cache_env.values(), *p.cache_args.values()))}))


def cache_env(arm: ArmConfig) -> dict[str, str]:
    """Env names that name a cache dir for this arm: the libraries' and its engine's."""
    return {**LIBRARY_CACHE_ENV, **profile_for(arm.engine).cache_env}


@dataclass(frozen=True)
class CacheLocation:
    arm: str
    kind: str
    host_path: str
    how: str  # where the config sets it, e.g. "arms.a.env.TRITON_CACHE_DIR"


def locations(config: Config) -> list[CacheLocation]:
    """Every cache location of every arm, as a host path; private ones (a container's own fs) left out."""
    process = not traits_of(config.runtime.kind).isolates_filesystem
    found = []
    for name, arm in config.arms.items():
        named, cache_args = cache_env(arm), profile_for(arm.engine).cache_args
        settings = [(named[k], v, f"arms.{name}.env.{k}") for k, v in arm.env.items() if k in named]
        settings += [(cache_args[k.lstrip("-")], str(v), f"arms.{name}.engine_args.{k}")
                     for k, v in arm.engine_args.items() if k.lstrip("-") in cache_args and v]
        if process:
            settings += [(named[k], os.environ[k], f"runtime.inherit_env {k} (from this host)")
                         for k in config.runtime.inherit_env if k in named and k not in arm.env
                         and k in os.environ and k not in PRIVATE_CACHE_ENV]
        for kind, path, how in settings:
            host = _host_path(arm, path, process)
            if host is not None:
                found.append(CacheLocation(name, kind, os.path.normpath(os.path.expanduser(host)), how))
        found += [CacheLocation(name, "mount", os.path.normpath(os.path.expanduser(v.host)),
                                f"arms.{name}.volumes[{i}] ({v.container}, writable)")
                  for i, v in enumerate(arm.volumes) if not v.read_only]
    return found


def _host_path(arm: ArmConfig, path: str, process: bool) -> str | None:
    """The host path a configured path lands on through the arm's mounts, as the runtime maps it; None when it
    is private: inside a container's own filesystem or a read-only mount (a process cannot be kept from
    writing one), or in a scratch dir (the run's own, per arm, or shared by a declared `share`, which
    guard/declared.py checks)."""
    posix = PurePosixPath(path)

    def under(container: str) -> bool:
        mount = PurePosixPath(container)
        return posix == mount or mount in posix.parents

    if any(under(s.container) for s in arm.scratch.values()):
        return None
    for volume in sorted(arm.volumes, key=lambda v: len(v.container), reverse=True):
        if under(volume.container):
            if volume.read_only and not process:  # both read the same input; neither can write it
                return None
            return str(PurePosixPath(volume.host) / posix.relative_to(volume.container))
    return path if process else None


def shared(config: Config) -> list[tuple[CacheLocation, CacheLocation]]:
    """Pairs of locations of two different arms where one path is the other or inside it."""
    pairs = []
    for a, b in combinations(locations(config), 2):
        if a.arm != b.arm and _overlap(a.host_path, b.host_path):
            pairs.append((a, b))
    return pairs


def _overlap(a: str, b: str) -> bool:
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


def problems(config: Config) -> list[str]:
    """One line per pair of arms sharing a hidden cache the study does not allow (study.allow_shared_caches)."""
    allowed = set(config.study.allow_shared_caches)
    found = [line("unknown-name", "study.allow_shared_caches", kind, KINDS) for kind in sorted(allowed - set(KINDS))]
    groups: dict[tuple[str, str], list[CacheLocation]] = {}
    for a, b in shared(config):
        group = groups.setdefault((a.arm, b.arm), [])
        group += [loc for loc in (a, b) if loc not in group]
    for (arm_a, arm_b), where in groups.items():
        kinds = sorted({loc.kind for loc in where})
        if allowed & set(kinds):
            continue
        paths = sorted({loc.host_path for loc in where}, key=len)
        found.append(f"arms '{arm_a}' and '{arm_b}' share a cache ({', '.join(kinds)}) at {paths[0]}, set by "
                     f"{'; '.join(loc.how for loc in where)}: give each arm its own dir (a scratch dir per arm, "
                     f"or different paths), or allow it with study.allow_shared_caches: [{kinds[0]}]")
    return found
