"""A run dir read once: run.json as `RunMeta`, the arms table as one `ArmStart` per arm and start (latest attempt),
in one `RecordedRun`; several compared as one study in a `Recorded`. Readers on the read side (compare, the report,
its sections) take these values and never read run.json or the arms table again (tests/unit/test_recorded.py counts
the reads)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from orchestrator.record.identity import CODE, PREFIX, identity_kind
from orchestrator.record.ledger import Reads
from orchestrator.record.paths import RunPaths, read_json


@dataclass(frozen=True)
class Identity:
    """What ran: an image id (`sha256:...`), or a process arm's code identity (recorded `process:sha256:...`)."""

    kind: str  # IMAGE or CODE (record/identity.py, the one reader of the recorded form)
    digest: str  # sha256:...

    @classmethod
    def parse(cls, recorded: str | None) -> Identity | None:
        if not recorded:
            return None
        kind = identity_kind(recorded)
        return cls(kind, recorded.removeprefix(PREFIX) if kind == CODE else recorded)

    def __str__(self) -> str:
        """As the record spells it."""
        return f"{PREFIX}{self.digest}" if self.kind == CODE else self.digest


@dataclass(frozen=True)
class ArmStart:
    """One start of an arm as the arms table recorded it (the latest attempt). `engine`: the engine that answered
    (a stand-in's is the reference engine's); a record before schema 7 did not say, and the declared one stands."""

    arm: str
    start: int
    attempt: int
    status: str | None
    error: str | None
    config: dict[str, Any]  # the arm as declared (config_json)
    config_json: str | None
    engine: str | None  # the answering engine's name; None: the default engine (a record before `engine:`)
    identity: Identity | None
    image_ref: str | None
    image_repo_digests: list[str]
    docker_run: str | None
    fingerprint: dict[str, Any] | None  # None: not taken (the arm failed before)
    matrix_key: str | None
    started_during: str | None
    placed_host: str | None
    wave: int | None
    gpu_uuids: list[str]
    cpuset: str | None
    start_ns: int | None
    ready_ns: int | None
    stop_ns: int | None
    model: str | None
    model_revision: str | None
    peak_memory_bytes: int | None
    peak_gpu_memory_bytes: int | None
    memory_note: str | None
    digests_note: str | None

    @property
    def image_id(self) -> str | None:
        return None if self.identity is None else str(self.identity)

    @classmethod
    def of(cls, row: dict[str, Any]) -> ArmStart:
        config, taken = json.loads(row.get("config_json") or "{}"), row.get("fingerprint_json")
        return cls(arm=row["arm"], start=row.get("start") or 0, attempt=row.get("attempt") or 0,
                   status=row.get("status"), error=row.get("error"), config=config, config_json=row.get("config_json"),
                   engine=row.get("engine") or config.get("engine"), identity=Identity.parse(row.get("image_id")),
                   image_ref=row.get("image_ref"), image_repo_digests=list(row.get("image_repo_digests") or []),
                   docker_run=row.get("docker_run"), fingerprint=json.loads(taken) if taken else None,
                   matrix_key=row.get("matrix_key"), started_during=row.get("started_during"),
                   placed_host=row.get("placed_host"), wave=row.get("wave"),
                   gpu_uuids=list(row.get("gpu_uuids") or []), cpuset=row.get("cpuset"),
                   start_ns=row.get("start_ns"), ready_ns=row.get("ready_ns"), stop_ns=row.get("stop_ns"),
                   model=row.get("model"), model_revision=row.get("model_revision"),
                   peak_memory_bytes=row.get("peak_memory_bytes"),
                   peak_gpu_memory_bytes=row.get("peak_gpu_memory_bytes"), memory_note=row.get("memory_note"),
                   digests_note=row.get("digests_note"))


@dataclass(frozen=True)
class RunMeta:
    """run.json, the fields the read side uses (the rest is the run's own bookkeeping); None: not recorded,
    the reader's default."""

    study: str = ""
    run_id: str = ""
    baseline: str | None = None
    control: str | None = None  # study.control
    expectations: dict[str, Any] | None = None
    arm_pairs: list[tuple[str, str]] | None = None
    sweep: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    near_tie_gap: float | None = None
    host: str | None = None
    expected_requests_per_arm: int | None = None
    timings_s: dict[str, float] | None = None
    planned_arms: list[str] | None = None
    explorer_branches: int | None = None
    sample_size: dict[str, Any] | None = None
    rescore: bool | None = None  # protocol.rescore: answers re-scored as prompts (analysis/decode_prefill.py)
    imported: dict[str, Any] | None = None  # `orchestrator import`: the source's tool, version, digest, lacks
    written: dict[str, Any] = field(default_factory=dict, repr=False)  # run.json whole, to merge several's

    @property
    def provenance(self) -> str | None:
        """An imported run's line: which tool wrote the source and what it lacks (imports/write.py); None: a run."""
        if not self.imported:
            return None
        tool = " ".join(str(w) for w in (self.imported.get("tool"), self.imported.get("version")) if w)
        return f"Imported from {tool}: {', '.join(self.imported.get('lacks') or ['nothing missing'])}"

    @classmethod
    def of(cls, data: dict[str, Any]) -> RunMeta:
        known = {f.name for f in fields(cls)} - {"written"}
        return cls(**{k: v for k, v in data.items() if k in known}, written=data)


@dataclass(frozen=True)
class RecordedRun:
    """One run dir, read once (`read_run`). `label`: how a comparison of several names its arms
    ('<run dir name>/'; '' alone); `reads`: its tables, each read once for every reader (record/ledger.py)."""

    paths: RunPaths
    meta: RunMeta
    starts: tuple[ArmStart, ...]  # every arm's every start, in the order the table holds them
    reads: Reads = field(compare=False, repr=False)
    label: str = ""

    @property
    def arms(self) -> list[ArmStart]:
        """The start of each arm that ran the protocol (start 0); study.starts' others are in `starts`."""
        return [s for s in self.starts if not s.start]

    def labelled(self, label: str) -> RecordedRun:
        return RecordedRun(self.paths, self.meta, self.starts, self.reads, label)


def read_run(paths: RunPaths, meta: dict[str, Any] | None = None) -> RecordedRun:
    """run.json (`meta`: as read already; none in a probe's run dir) and the arms table, read once."""
    if meta is None:
        meta = read_json(paths.meta) if paths.meta.is_file() else {}
    reads = Reads(paths)
    starts = tuple(ArmStart.of(row) for row in reads.table("arms").to_pylist())
    return RecordedRun(paths, RunMeta.of(meta), starts, reads)


@dataclass(frozen=True)
class Recorded:
    """What a report is made from: the runs compared (one, or several as one study, their arms labelled), the
    meta that speaks for them, and where the reports go."""

    out: RunPaths
    meta: RunMeta
    runs: tuple[RecordedRun, ...] = field(default=())

    @classmethod
    def of(cls, runs: list[RecordedRun], out: RunPaths | None = None, meta: RunMeta | None = None) -> Recorded:
        """Labelled as a comparison labels them: '' for one run, '<run dir name>/' for each of several."""
        labelled = runs if len(runs) == 1 else [r.labelled(f"{r.paths.root.name}/") for r in runs]
        return cls(out or runs[0].paths, meta or runs[0].meta, tuple(labelled))

    @property
    def paths(self) -> list[RunPaths]:
        return [r.paths for r in self.runs]


def read(paths: RunPaths) -> Recorded:
    """One run dir, its reports into itself."""
    return Recorded.of([read_run(paths)])


def of(sources: Recorded | RunPaths | list[RunPaths]) -> Recorded:
    """The runs as one comparison reads them (each run dir read once); a `Recorded` as it is."""
    if isinstance(sources, Recorded):
        return sources
    return Recorded.of([read_run(p) for p in ([sources] if isinstance(sources, RunPaths) else sources)])
