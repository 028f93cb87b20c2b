"""What one arm's run passes around: the arm being started (`Launch`), and what `run --resume` sends again
(`ResumePlan`)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.arms import ResolvedArm
from orchestrator.config.schema import ArmConfig
from orchestrator.run.arm.resources import MemorySampler
from orchestrator.runtime.spec import Handle, Runtime


@dataclass(frozen=True)
class ResumePlan:
    """`run --resume`: per arm, the groups to send again (run/resume.py); arms not named are complete."""

    attempt: int
    groups: dict[str, set[str]]  # an arm named with no group: only some of its later starts are started again
    # protocol.stop_after_divergences: per arm, the recorded rows that count toward it (a cell that already has
    # its divergences sends nothing more)
    recorded: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # study.starts: per arm, its later starts that did not complete (absent: none)
    starts: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Launch:
    """An arm being started: what the rest of its run needs once its engine is ready."""

    name: str
    resolved: ResolvedArm  # as it runs (config/arms.py), placed; its identity set once its image is resolved
    row: dict[str, Any]  # its `arms` row, filled as it goes
    runtime: Runtime  # the runtime (and Docker host) it runs on
    handle: Handle | None = None
    image_source: dict[str, Any] = field(default_factory=dict)
    probing: Future[dict[str, Any]] | None = None
    model: Future[tuple[str | None, str | None]] | None = None  # (model, revision), hashed while it loads
    sampler: MemorySampler | None = None
    start: int = 0  # study.starts: 0 runs the protocol
    starts: int = 1

    @property
    def label(self) -> str:
        """How progress names it: '[arm]', or '[arm] start 2/3' for a later start."""
        return f"[{self.name}]" + (f" start {self.start + 1}/{self.starts}" if self.start else "")

    @property
    def arm(self) -> ArmConfig:
        return self.resolved.arm
