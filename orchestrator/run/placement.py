"""Arms side by side (`study.parallel_arms`): which arms run at once, on which host, GPUs and cores. Pure logic
over the hosts' inventories (`Runtime.inventory`): the runner carries a placement out through the runtime
(`ContainerSpec.gpus` / `cpuset`, the arm's Docker host), and the guard compares what each placed arm observed.

Arms are taken in the study's order; each wave holds every arm that still fits beside the ones already in it
(at most `parallel_arms`), on the host with the most free GPUs, then cores. Resources of arms in one wave are
disjoint: GPUs (by index, with their UUIDs), cores (a cpuset per arm that asks for `cpus`), memory (the sum of
the arms' `memory` limits stays within the host's). An arm that fits on no host even alone is refused before
anything starts."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from orchestrator.config.arms import Placement, ResolvedArm, resolve_arms
from orchestrator.config.schema import ArmConfig, Config
from orchestrator.errors import ConfigError, counted
from orchestrator.runtime.spec import Inventory
from orchestrator.runtime.traits import traits_of

ALL = "all"
LOCAL = "local"


@dataclass(frozen=True)
class Needs:
    """What one arm asks for: GPUs by ids, by count or all of a host; cores; memory; a host of its own."""

    arm: str
    gpu_ids: tuple[int, ...] = ()
    gpu_count: int = 0
    all_gpus: bool = False
    cpus: int = 0  # 0: no cpuset (the arm may run on any core)
    memory_bytes: int = 0
    host: str | None = None  # the arm names its Docker host (docker_host): only there


@dataclass
class _Free:
    inventory: Inventory
    gpus: list[int] = field(default_factory=list)
    cpus: list[int] = field(default_factory=list)
    memory_bytes: int | None = None
    gpu_arms: int = 0  # arms using GPUs here this wave
    all_gpus_taken: bool = False

    @classmethod
    def of(cls, inventory: Inventory) -> _Free:
        return cls(inventory, [g.index for g in inventory.gpus], list(inventory.cpus), inventory.memory_bytes)


def _size_bytes(text: str | None) -> int:
    """Docker's memory form: '512m', '32g', '1024' (bytes)."""
    if not text:
        return 0
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", text.lower())
    if match is None:
        return 0  # config/validate.py refuses it before this runs
    number: int = int(match.group(1))
    power: int = "bkmgt".index(match.group(2) or "b")
    return number << (10 * power)


def needs_of(name: str, arm: ArmConfig) -> Needs:
    gpus = arm.gpus
    return Needs(arm=name, all_gpus=gpus == ALL,
                 gpu_ids=tuple(int(g) for g in gpus.split(",")) if gpus and gpus != ALL else (),
                 gpu_count=arm.gpu_count or 0, cpus=arm.cpus or 0, memory_bytes=_size_bytes(arm.memory),
                 host=arm.docker_host)


def _fit(need: Needs, free: _Free) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(GPU indices, cores) the arm would take here, or None when it does not fit now."""
    wants_gpus = need.all_gpus or need.gpu_ids or need.gpu_count
    if wants_gpus and free.all_gpus_taken:
        return None
    if need.all_gpus:
        if free.gpu_arms:
            return None
        gpus: tuple[int, ...] = tuple(free.gpus)
    elif need.gpu_ids:
        if free.inventory.gpus_known and not set(need.gpu_ids) <= set(free.gpus):
            return None
        gpus = need.gpu_ids
    else:
        if need.gpu_count > len(free.gpus):
            return None
        gpus = tuple(free.gpus[:need.gpu_count])
    if need.cpus > len(free.cpus):
        return None
    if need.memory_bytes and free.memory_bytes is not None and need.memory_bytes > free.memory_bytes:
        return None
    return gpus, tuple(free.cpus[:need.cpus])


def _take(need: Needs, free: _Free, gpus: tuple[int, ...], cpus: tuple[int, ...]) -> None:
    free.gpus = [g for g in free.gpus if g not in gpus]
    free.cpus = [c for c in free.cpus if c not in cpus]
    if free.memory_bytes is not None:
        free.memory_bytes -= need.memory_bytes
    free.gpu_arms += bool(gpus or need.all_gpus or need.gpu_ids)
    free.all_gpus_taken |= need.all_gpus


def _never_fits(need: Needs, hosts: dict[str, Inventory]) -> str | None:
    where = [need.host] if need.host else list(hosts)
    if all(_fit(need, _Free.of(hosts[h])) is None for h in where):
        gpus = counted(need.gpu_count, "GPU") if need.gpu_count else f"GPUs {','.join(map(str, need.gpu_ids))}" \
            if need.gpu_ids else "no GPU"
        memory = f", {need.memory_bytes >> 20} MiB of memory" if need.memory_bytes else ""
        offered = ", ".join(f"{h}: {counted(len(hosts[h].cpus), 'core')}, {counted(len(hosts[h].gpus), 'GPU')}"
                            for h in where)
        return (f"arm '{need.arm}' needs {gpus}, {counted(need.cpus, 'core')}{memory}: more than any host has "
                f"({offered}); lower arms.{need.arm}.gpu_count/cpus/memory, or add a host to runtime.hosts")
    return None


def place(needs: list[Needs], hosts: dict[str, Inventory], parallel: int | None) -> list[list[Placement]]:
    """Waves of placements; `parallel`: the most arms at once (None: as many as fit). Raises ConfigError
    when an arm fits on no host even alone."""
    if problems := [p for need in needs if (p := _never_fits(need, hosts))]:
        raise ConfigError(problems)
    waves: list[list[Placement]] = []
    todo = list(needs)
    while todo:
        free = {host: _Free.of(inventory) for host, inventory in hosts.items()}
        wave: list[Placement] = []
        for need in list(todo):
            if parallel is not None and len(wave) >= parallel:
                break
            candidates = [need.host] if need.host else list(hosts)
            fits = [(host, fit) for host in candidates if (fit := _fit(need, free[host])) is not None]
            if not fits:
                continue
            # the host with the most free GPUs, then cores: arms spread over the hosts
            host, (gpus, cpus) = max(fits, key=lambda f: (len(free[f[0]].gpus), len(free[f[0]].cpus)))
            _take(need, free[host], gpus, cpus)
            uuids = {g.index: g.uuid for g in hosts[host].gpus}
            wave.append(Placement(need.arm, host, len(waves) + 1, gpus,
                                  tuple(uuids[g] for g in gpus if g in uuids), cpus, need.all_gpus))
            todo.remove(need)
        waves.append(wave)
    return waves


def parallel_limit(config: Config) -> int | None:
    """`study.parallel_arms`: N arms at most, or None for `auto` (as many as fit)."""
    value = config.study.parallel_arms
    return None if str(value) == "auto" else int(value)


def uses_placement(config: Config) -> bool:
    """Arms side by side, or arms that ask for cores or a GPU count (placed also one at a time)."""
    return str(config.study.parallel_arms) != "1" or any(
        arm.cpus or arm.gpu_count for arm in config.arms.values())


def study_hosts(config: Config) -> list[str]:
    """Where arms without a Docker host of their own may run: `runtime.hosts`, else the study's host."""
    if traits_of(config.runtime.kind).ships_images and config.runtime.hosts:
        return list(config.runtime.hosts)
    return [LOCAL]


def study_needs(resolved: Mapping[str, ResolvedArm], arms: list[str] | None = None) -> list[Needs]:
    """What each resolved arm (of `arms`, default all) asks for, as it runs (a stand-in asks for no GPU)."""
    return [dataclasses.replace(needs, host=needs.host if r.traits.ships_images else None)  # else: one host
            for name, r in resolved.items() if arms is None or name in arms for needs in [needs_of(name, r.arm)]]


def waves(config: Config, inventory_of: Callable[[str], Inventory], arms: list[str] | None = None,
          resolved: Mapping[str, ResolvedArm] | None = None) -> list[list[Placement]]:
    """The study's waves over the inventories of the hosts its arms may run on (`inventory_of(host)`);
    `resolved`: the arms as config/arms.py `resolve_arms` made them (made here for a caller with the config)."""
    needs = study_needs(resolve_arms(config) if resolved is None else resolved, arms)
    return place(needs, _inventories(config, needs, inventory_of), parallel_limit(config))


def problems(config: Config, inventory_of: Callable[[str], Inventory],
             resolved: Mapping[str, ResolvedArm] | None = None) -> list[str]:
    """One line for each arm that fits on no host even alone: refused before anything starts (run/refusals.py),
    by `check` as by `run`."""
    if not uses_placement(config):
        return []
    needs = study_needs(resolve_arms(config) if resolved is None else resolved)
    hosts = _inventories(config, needs, inventory_of)
    return [problem for need in needs if (problem := _never_fits(need, hosts))]


def _inventories(config: Config, needs: list[Needs], inventory_of: Callable[[str], Inventory]
                 ) -> dict[str, Inventory]:
    hosts = dict.fromkeys([*study_hosts(config), *(n.host for n in needs if n.host)])
    return {host: inventory_of(host) for host in hosts}


def render_waves(waves: list[list[Placement]]) -> list[str]:
    """The `plan` lines: one per wave, each arm with its host, GPUs and cores."""
    lines = []
    for number, wave in enumerate(waves, 1):
        parts = []
        for p in wave:
            what = [p.host]
            if p.all_gpus:
                what.append("all GPUs")
            elif p.gpus:
                what.append("GPU " + ",".join(map(str, p.gpus)))
            if p.cpuset:
                what.append(f"cores {p.cpuset}")
            parts.append(f"{p.arm} ({', '.join(what)})")
        lines.append(f"# wave {number}: " + "; ".join(parts))
    return lines
