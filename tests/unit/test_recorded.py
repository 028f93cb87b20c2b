"""A run dir is read once on the read side: `compare` of a 4-arm run reads run.json once and each table once (the
typed `RecordedRun`, record/recorded.py, and the tables it keeps, record/ledger.py), every section of the report takes
that value; the arms table records the engine that answered, and the report speaks with its profile (older records:
the declared engine)."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orchestrator import cli
from orchestrator.analysis.alignment import DETAIL
from orchestrator.record import tables
from orchestrator.record.identity import CODE, IMAGE
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Identity, read_run
from orchestrator.record.tables import TableWriter
from tests.conftest import ROOT
from tests.load_record import ArmPlan, write_load_record

ARMS = ("a", "b", "c", "d")


class Reads:
    """Every read of a record's Parquet: a table's parts listed, a part's footer, and each column of a part's row
    group (pyarrow.parquet.ParquetFile is how record/ reads every part's data but a filtered read's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listed: collections.Counter[str] = collections.Counter()
        self.footers: collections.Counter[str] = collections.Counter()
        self.chunks: collections.Counter[tuple[str, int, str]] = collections.Counter()
        parts, footer, reads = tables.part_files, tables._footer, self

        def listed(paths: RunPaths, table: str) -> list[Path]:
            reads.listed[table] += 1
            return parts(paths, table)

        def footed(path: Path) -> pq.FileMetaData:
            reads.footers[f"{path.parent.name}/{path.name}"] += 1
            return footer(path)

        class File(pq.ParquetFile):  # type: ignore[misc]
            def __init__(self, source: Path, **kwargs: object) -> None:
                super().__init__(source, **kwargs)
                self.name = f"{Path(source).parent.name}/{Path(source).name}"

            def _count(self, groups: list[int], columns: list[str] | None) -> None:
                for group in groups:
                    for column in columns if columns is not None else self.schema_arrow.names:
                        reads.chunks[(self.name, group, column)] += 1

            def read(self, columns: list[str] | None = None, **kwargs: object) -> object:
                self._count(list(range(self.metadata.num_row_groups)), columns)
                return super().read(columns=columns, **kwargs)

            def iter_batches(self, *args: object, row_groups: list[int] | None = None,
                             columns: list[str] | None = None, **kwargs: object) -> object:
                self._count(row_groups if row_groups is not None else list(range(self.metadata.num_row_groups)),
                            columns)
                return super().iter_batches(*args, row_groups=row_groups, columns=columns, **kwargs)

            def read_row_group(self, group: int, columns: list[str] | None = None, **kwargs: object) -> object:
                self._count([group], columns)
                return super().read_row_group(group, columns=columns, **kwargs)

            def read_row_groups(self, groups: list[int], columns: list[str] | None = None,
                                **kwargs: object) -> object:
                self._count(groups, columns)
                return super().read_row_groups(groups, columns=columns, **kwargs)

        monkeypatch.setattr(tables, "part_files", listed)
        monkeypatch.setattr(tables, "_footer", footed)
        monkeypatch.setattr(pq, "ParquetFile", File)


def test_compare_of_a_four_arm_run_reads_each_table_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of 4 arms, 2 starts each, one start that failed (its logs read), a load phase whose windows interleave
    the cells (record/tables.py interleaves: the ledger is read first, the lists streamed beside it), a request
    re-sent (`run --resume`): each table read once, but the explorer's representatives' rows (`_read_once`)."""
    root = tmp_path / "run"
    plans = {arm: ArmPlan([0.1, 0.1], ready_s=[4.0, 4.2], tokens=True) for arm in ARMS}
    plans["c"] = ArmPlan([0.1, 0.1], ready_s=[4.0, 4.2], tokens=True, divergent_probes=1)
    plans["d"] = ArmPlan([0.1, 0.1], ready_s=[4.0, 4.2], failed_starts=1)
    paths = write_load_record(root, plans)
    [resent] = [r for r in tables.read_table(paths, "responses").to_pylist() if r["request_id"] == "b/load_8/1/0"]
    with TableWriter(paths, "responses", "resent") as writer:
        writer.append({**resent, "attempt": 1})
    report = _read_once(paths, monkeypatch)
    assert report["arms"][-1]["arm"] == "d" and [c["n"] for c in report["cells"]] == [4] * 4


def test_compare_of_a_four_arm_run_in_phases_reads_each_table_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """4 arms in a sequential and a concurrent phase, each cell's rows together (no part interleaves them: the
    comparison's pass reads the ledger's columns too, for the report's other sections), an arm that failed."""
    from tests.unit.test_compare import row

    paths = RunPaths(tmp_path / "run").make()
    paths.meta.write_text(json.dumps({"study": "s", "run_id": "r", "baseline": "a"}))
    with TableWriter(paths, "responses", "r", flush_rows=3) as writer:
        for arm in ARMS:
            writer.append(row(arm, "p", "seq", [1, 2], cold=True, role="cold", request_id=f"{arm}/p/cold"))
            for phase, kind in (("seq", "sequential"), ("conc", "concurrent")):
                for i in range(4):
                    ids = [1, 3] if (arm, phase, i) == ("c", "seq", 3) else [1, 2]  # one cell varies
                    writer.append(row(arm, "p", phase, ids, kind=kind, role="measured",
                                      request_id=f"{arm}/p/{phase}/0/{i}", repeat=i))
    with TableWriter(paths, "arms", "arms") as writer:
        for arm in ARMS:
            writer.append(_arms_row(arm, config_json="{}", status="failed" if arm == "d" else "completed"))
    report = _read_once(paths, monkeypatch)
    assert [c["n"] for c in report["cells"]] == [4] * 8


def _read_once(paths: RunPaths, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """`compare` of the run, its reads counted: run.json once, each table's parts listed once, each part's footer
    once, and each column of each row group of each part once, but the explorer's representatives'."""
    reads, read_text = Reads(monkeypatch), Path.read_text
    meta: collections.Counter[str] = collections.Counter()

    def counted_text(path: Path, *args: object, **kwargs: object) -> str:
        meta[path.name] += path.name == "run.json"
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counted_text)
    assert cli.main(["compare", str(paths.root)]) == 4  # arm d failed: the measurement failed
    report: dict[str, object] = json.loads(read_text(paths.report_json))
    assert meta["run.json"] == 1
    assert set(reads.listed) == {"arms", "responses", "logs", "probes", "digests"}  # the logs: of the failed arm
    assert max(reads.listed.values()) == 1
    assert len(reads.footers) == sum(len(tables.part_files(paths, t)) for t in reads.listed)
    assert max(reads.footers.values()) == 1
    assert {column for _, _, column in reads.chunks} >= {"arm", "token_ids", "send_ns", "engine"}
    # The one second read: the explorer's, of the row groups whose request-id statistics admit a representative of
    # the cell that varies (c's two branches; their top-k lists were never read, and a request's tokens are shown
    # as the server sent them), not a pass over the table.
    assert [c["distinct_signatures"] for c in report["cells"]].count(2) == 1  # type: ignore[attr-defined]
    read_twice = sorted(chunk for chunk, times in reads.chunks.items() if times > 1)
    assert {column for _, _, column in read_twice} <= set(DETAIL)
    assert 0 < len({(part, group) for part, group, _ in read_twice}) <= 2
    return report


def _arms_row(arm: str, **row: object) -> dict[str, object]:
    return {"study": "s", "run_id": "r", "arm": arm, "status": "completed", "attempt": 0, "start": 0, **row}


def test_the_answering_engine_is_read_and_an_older_record_falls_back_to_the_declared_one(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    with TableWriter(paths, "arms", "arms") as writer:
        writer.append(_arms_row("stand_in", config_json=json.dumps({"engine": "vllm"}), engine="reference",
                                image_id="sha256:abc"))
        writer.append(_arms_row("older", config_json=json.dumps({"engine": "transformers_serve"}),
                                image_id="process:sha256:def"))
        writer.append(_arms_row("oldest", config_json="{}"))
    stand_in, older, oldest = read_run(paths).arms
    assert (stand_in.engine, older.engine, oldest.engine) == ("reference", "transformers_serve", None)
    assert stand_in.identity == Identity(IMAGE, "sha256:abc") and stand_in.image_id == "sha256:abc"
    assert older.identity == Identity(CODE, "sha256:def") and older.image_id == "process:sha256:def"
    assert oldest.identity is None


def test_a_stand_in_runs_report_names_the_reference_engines_profile(tmp_path: Path) -> None:
    """The arms table says the reference engine answered a vLLM arm: the report's "not observable" reason is the
    reference engine's, not vLLM's."""
    from orchestrator.analysis.compare import arm_engines, of

    paths = write_load_record(tmp_path / "run", {"base": ArmPlan([0.1, 0.1])})
    with TableWriter(paths, "arms", "stand-in") as writer:  # a later attempt of the arm, as a stand-in ran it
        writer.append(_arms_row("base", attempt=1, config_json=json.dumps({"engine": "vllm"}), engine="reference"))
    [(profile, _)] = arm_engines(of(paths)).values()
    assert profile.name == "reference"


PARQUET = re.compile(r"pyarrow\.parquet|pyarrow\.dataset|pyarrow import (?:dataset|parquet)|read_parquet|\.parquet\b|"
                     r"\bpq\.")


def test_no_module_outside_record_opens_parquet() -> None:
    """Only `record/` knows the record is Parquet: every other package reads it through record/'s readers."""
    outside = [path for package in ("orchestrator", "hydra_plugins") for path in sorted((ROOT / package).rglob("*.py"))
               if not path.is_relative_to(ROOT / "orchestrator" / "record")]
    assert len(outside) > 100  # the scan sees the code
    found = [f"{path.relative_to(ROOT)}:{number}: {text.strip()}" for path in outside
             for number, text in enumerate(path.read_text().splitlines(), 1) if PARQUET.search(text)]
    assert found == []


def test_reproduce_pins_each_arm_to_its_recorded_identity_a_process_arm_keeping_its_source(tmp_path: Path) -> None:
    from orchestrator import config
    from orchestrator.config.schema import BuildConfig
    from orchestrator.reproduce.rerun import pin_images

    typed = config.to_typed(config.compose(["protocol=smoke"]))
    image_arm, process_arm = list(typed.arms)[:2]
    source = BuildConfig(context="arms/mine")  # a process arm's source folder: part of its code identity
    typed.arms[image_arm].build = typed.arms[process_arm].build = source
    paths = RunPaths(tmp_path / "run")
    with TableWriter(paths, "arms", "arms") as writer:
        writer.append(_arms_row(image_arm, image_id="sha256:abc"))
        writer.append(_arms_row(process_arm, image_id="process:sha256:def"))
    pinned = pin_images(typed, read_run(paths))
    assert pinned == {image_arm: Identity(IMAGE, "sha256:abc"), process_arm: Identity(CODE, "sha256:def")}
    assert (typed.arms[image_arm].image, typed.arms[process_arm].image) == ("sha256:abc", "process:sha256:def")
    assert (typed.arms[image_arm].build, typed.arms[process_arm].build) == (BuildConfig(), source)


def test_probe_arm_takes_a_study_arm_as_its_run_recorded_it(tmp_path: Path) -> None:
    from orchestrator.config.probe import RecordedArm
    from orchestrator.errors import ConfigError
    from orchestrator.run.kernel_probes import study_arm

    paths = RunPaths(tmp_path / "run")
    with TableWriter(paths, "arms", "arms") as writer:
        writer.append(_arms_row("hooked", config_json='{"image": "img:1"}', image_id="process:sha256:def"))
        writer.append(_arms_row("never", config_json="{}", status="failed"))
    assert study_arm(paths.root, "hooked") == RecordedArm("hooked", '{"image": "img:1"}', "process:sha256:def", CODE)
    assert study_arm(paths.root, "other") is None
    with pytest.raises(ConfigError, match=r"arm 'never' of the study in .* did not start"):
        study_arm(paths.root, "never")


def test_show_of_an_interrupted_run_names_each_arms_status_from_the_run_read_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_load_record(tmp_path / "run", {"base": ArmPlan([0.1, 0.1]), "other": ArmPlan([0.1, 0.1])})
    with TableWriter(paths, "arms", "stopped") as writer:  # the later attempt of `other`: Ctrl-C stopped it
        writer.append(_arms_row("other", attempt=1, status="interrupted"))
    meta = {**json.loads(paths.meta.read_text()), "interrupted": "2026-12-06T07:00:00+00:00", "planned_arms":
            ["base", "other", "third"]}
    paths.meta.write_text(json.dumps(meta))
    assert cli.main(["show", str(paths.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("- ")] == [
        "- base (completed)", "- other (interrupted)", "- third (not started)"]


def test_a_stand_in_run_records_the_reference_engine_and_its_report_speaks_with_its_profile(tmp_path: Path) -> None:
    """A vLLM study under stand_in=IMAGE: the reference engine answered, so the arms table says so and the report's
    reasons are its profile's, not vLLM's (before schema 7 the report re-derived vLLM's from the declared arm)."""
    from orchestrator import config
    from orchestrator.engines import ENGINES
    from orchestrator.record.recorded import Recorded
    from orchestrator.report.build import build
    from orchestrator.run.study import StudyRunner
    from tests.fake_engine import fake_runtime

    typed = config.to_typed(config.compose(["study=vllm_cpu_repeatability", "protocol=smoke",
                                            "stand_in=fake-engine"]))
    paths = RunPaths(tmp_path / "run")
    runner = StudyRunner(typed, paths, "r", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    run = read_run(paths, {"study": "s", "run_id": "r"})
    assert [(a.config["engine"], a.engine) for a in run.starts] == [("vllm", "reference")] * len(typed.arms)
    report = build(Recorded.of([run]))
    assert set(report.unobserved.values()) == {ENGINES["reference"].unobserved()} != {ENGINES["vllm"].unobserved()}


def test_report_build_takes_the_recorded_runs_not_a_spread_of_run_json() -> None:
    import inspect

    from orchestrator.report.build import build

    assert list(inspect.signature(build).parameters) == ["recorded"]
