"""The warm-up extended until steady (`load.warmup.extend_windows`, docs/load.md "The steady part"): past a load
point's planned windows, each further window is sent only while the point's rows so far have no steady part, or
one of fewer windows than planned (analysis/steady.py, as the cost will read them).

protocol.plan plans the further windows (indices `windows` on, each with its own seeded schedule, as any window,
so two arms' window 7 pair as their window 0 does); `resolve` sends or leaves each. The decision for window w
reads only the rows of the windows before it, so `run --resume` decides as the run did, and a run stopped before
w leaves w to be decided when it is reached.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.analysis import steady
from orchestrator.config.schema import LoadConfig, PhaseKind, ProtocolConfig
from orchestrator.run.send import protocol

COUNTED = (protocol.MEASURED, protocol.BACKGROUND)
# What the rule reads of a row besides its phase, role and request id (`run --resume` reads them from the record)
EXTENSION_COLUMNS = ("start", "batch_id", "send_ns", "recv_ns", "error")


class WarmupExtension:
    skipped_because = "steady without them: load.warmup.extend_windows"

    def __init__(self, proto: ProtocolConfig) -> None:
        self.loads: dict[str, LoadConfig] = {name: p.load for name, p in protocol.cell_phases(proto).items()
                                             if p.kind is PhaseKind.load and protocol.extended(name, p)}
        self.rows: dict[str, dict[int, dict[str, Mapping[str, Any]]]] = {}  # phase -> window -> request id -> row

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows as they are recorded (or a resumed run's recorded rows)."""
        for row in rows:
            if row["phase"] in self.loads and row["role"] in COUNTED and not row.get("start"):
                by_window = self.rows.setdefault(row["phase"], {})
                by_window.setdefault(int(row["batch_id"]), {})[row["request_id"]] = row

    def wanted(self, phase: str, window: int) -> bool | None:
        """Whether the load point's window is sent: a planned one always; a further one while the windows
        before it are not steady enough; None: a window before it is not recorded, so it cannot be told yet."""
        load = self.loads.get(phase)
        if load is None or window < load.windows:
            return True
        recorded = self.rows.get(phase, {})
        for at in range(load.windows, window + 1):
            if any(w not in recorded for w in range(at)):
                return None
            part = steady.steady_of_rows(row for w in range(at) for row in recorded[w].values())
            if part.steady and len(part.windows) >= load.windows:
                return False  # steady with the windows asked for: this one and every later one are not sent
        return True

    def resolve(self, group: list[protocol.Request]) -> list[protocol.Request] | None:
        """The group, or None where it is a further window the load point does not need."""
        first = group[0]
        if first.window is None or first.role == protocol.WARMUP:
            return group
        return None if self.wanted(first.phase, first.window.index) is False else group
