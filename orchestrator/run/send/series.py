"""A series to saturation as it is sent (`load.series`, config/series.py): between its points, from the rows
recorded so far, whether it goes on and at which rate.

protocol.plan plans every point's windows up front, a later point at its placeholder rate (config/series.py);
before a later point's group is sent, `resolve` gives it its offered rate (from point 0's mean latency L) or
leaves it unsent: once an earlier point over-saturated (analysis/saturation.py), or point 0 had no answer. The
decisions read only the recorded rows of the earlier points, so `run --resume`, having observed the first run's
rows, decides as it did: the same rates, the same stop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.analysis import saturation
from orchestrator.config import series
from orchestrator.config.schema import LoadConfig, ProtocolConfig
from orchestrator.run.load import schedule
from orchestrator.run.send import protocol

COUNTED = (protocol.MEASURED, protocol.BACKGROUND)
# What the rule reads of a row besides its phase, role and request id (`run --resume` reads them from the record)
SERIES_COLUMNS = ("start", "batch_id", "offered_rate_per_s", "scheduled_ns", "first_token_ns", "send_ns", "recv_ns")


class SeriesRule:
    skipped_because = "the series stopped: load.series"

    def __init__(self, proto: ProtocolConfig) -> None:
        self.loads: dict[str, LoadConfig] = {name: p.load for name, p in proto.phases.items() if series.is_series(p)}
        self.rows: dict[str, dict[str, Mapping[str, Any]]] = {}  # point phase -> request id -> its latest row

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows as they are recorded (or a resumed run's recorded rows): a point's probes and background."""
        for row in rows:
            point = series.parse(row["phase"])
            if point is not None and point[0] in self.loads and row["role"] in COUNTED and not row.get("start"):
                self.rows.setdefault(row["phase"], {})[row["request_id"]] = row

    def ended(self, phase: str) -> str | None:
        """Why the series stops before this point, once its earlier points are recorded whole; None: it goes
        on, or cannot be told yet."""
        point = series.parse(phase)
        if point is None or point[0] not in self.loads:
            return None
        name, k = point
        load = self.loads[name]
        for j in range(k):
            rows = self._whole(series.point_name(name, j), load)
            if rows is None:
                return None
            if j == 0 and self.latency_s(name) is None:
                return "point 0 had no answer: no single-request latency"
            if j > 0:
                rate = next((r["offered_rate_per_s"] for r in rows if r.get("offered_rate_per_s")), None)
                said = saturation.verdict(saturation.windows_of_rows(rows), load.series.tolerance, rate)
                if said.over_saturated:
                    return f"point {j} over-saturated ({said.why})"
        return None

    def resolve(self, group: list[protocol.Request]) -> list[protocol.Request] | None:
        """The group as it is sent: a later point's at its offered rate; None where the series has stopped."""
        first = group[0]
        point = series.parse(first.phase)
        if point is None or point[0] not in self.loads or point[1] == 0 or first.window is None:
            return group
        if self.ended(first.phase) is not None:
            return None
        name, k = point
        latency_s = self.latency_s(name)
        assert latency_s is not None, "a later point is sent once point 0 is recorded"
        window = dataclasses.replace(first.window, load=series.point_load(self.loads[name], k, latency_s))
        slots = schedule.slots(window.load, list(window.probes), list(window.texts), window.index,
                               max_tokens=window.max_tokens)
        return [protocol.load_request(window, s.seq, s.offset_s) for s in slots]

    def latency_s(self, name: str) -> float | None:
        """Point 0's mean latency (answer's end less send) over its answered requests; None: none answered."""
        rows = self.rows.get(series.point_name(name, 0), {}).values()
        spans = [(r["recv_ns"] - r["send_ns"]) / 1e9 for r in rows
                 if r.get("error") is None and r.get("recv_ns") is not None and r.get("send_ns") is not None]
        return sum(sorted(spans)) / len(spans) if spans else None  # sorted: the same sum in any order read

    def _whole(self, phase: str, load: LoadConfig) -> list[Mapping[str, Any]] | None:
        """A point's rows once every window of it is recorded (a window is whole or absent), else None."""
        rows = list(self.rows.get(phase, {}).values())
        return rows if len({r["batch_id"] for r in rows}) >= load.windows else None
