"""`runtime.overlap_arm_starts`: an arm may start while the one before it runs its sequential phases only when
the two share nothing that the start could disturb or that could carry state across: a GPU, a cache, a host
port. Refused before anything starts, one line per pair, with the fix."""

from __future__ import annotations

from itertools import combinations, pairwise

from orchestrator.config.schema import ArmConfig, Config
from orchestrator.guard import caches


def _gpus(arm: ArmConfig) -> set[str] | None:
    """The arm's device ids; None for none, {"all"} for every one."""
    if arm.gpus is None:
        return None
    return {"all"} if arm.gpus == "all" else {part.strip() for part in arm.gpus.split(",")}


def shared(config: Config, a: str, b: str, gpus: bool = True) -> list[str]:
    """What arms `a` and `b` both use that one's engine could disturb or leave state in for the other."""
    first, second = config.arms[a], config.arms[b]
    found = []
    gpus_a, gpus_b = _gpus(first), _gpus(second)
    if gpus and gpus_a is not None and gpus_b is not None and ("all" in gpus_a | gpus_b or gpus_a & gpus_b):
        found.append(f"GPUs ({first.gpus} and {second.gpus})")
    paths = sorted({x.host_path for x, y in caches.shared(config) if {x.arm, y.arm} == {a, b}})
    found += [f"a cache at {path}" for path in paths[:1]]
    shares = {s.share for s in first.scratch.values() if s.share} & {s.share for s in second.scratch.values()}
    found += [f"scratch dir '{share}'" for share in sorted(shares)]
    if first.network_host and second.network_host and first.port == second.port:
        found.append(f"host port {first.port} (host networking)")
    return found


def problems(config: Config) -> list[str]:
    if str(config.study.parallel_arms) != "1":
        return [f"study.parallel_arms: arms '{a}' and '{b}' share {', '.join(found)}: running them at the same "
                "time could change what each measures; give them their own, or set study.parallel_arms=1"
                for a, b in combinations(config.arms, 2) if (found := shared(config, a, b, gpus=False))]
    if not config.runtime.overlap_arm_starts:
        return []
    return [f"runtime.overlap_arm_starts: arms '{a}' and '{b}' share {', '.join(found)}: starting '{b}' while "
            f"'{a}' runs could change what '{a}' measures or leave state for '{b}'; give them their own, or set "
            "runtime.overlap_arm_starts=false"
            for a, b in pairwise(config.arms) if (found := shared(config, a, b))]
