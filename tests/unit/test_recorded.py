"""A run dir is read once on the read side: `compare` of a 4-arm run reads run.json and the arms table once (the
typed `RecordedRun`, record/recorded.py), every section of the report takes that value; the arms table records the
engine that answered, and the report speaks with its profile (older records: the declared engine)."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.record import tables
from orchestrator.record.identity import CODE, IMAGE
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import Identity, read_run
from orchestrator.record.tables import TableWriter
from tests.conftest import ROOT
from tests.load_record import ArmPlan, write_load_record

ARMS = ("a", "b", "c", "d")


def test_compare_of_a_four_arm_run_reads_run_json_and_each_small_table_once(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    write_load_record(root, {arm: ArmPlan([0.1, 0.1], ready_s=[4.0, 4.2]) for arm in ARMS})
    reads: collections.Counter[str] = collections.Counter()
    parts, read_text = tables.part_files, Path.read_text

    def counted_parts(paths: RunPaths, table: str) -> list[Path]:  # every read of a table lists its parts once
        reads[table] += 1
        return parts(paths, table)

    def counted_text(path: Path, *args: object, **kwargs: object) -> str:
        reads[path.name] += path.name == "run.json"
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tables, "part_files", counted_parts)
    monkeypatch.setattr(Path, "read_text", counted_text)
    assert cli.main(["compare", str(root)]) == 0
    assert json.loads((root / "report.json").read_text())["arms"][-1]["arm"] == "d"
    assert (reads["run.json"], reads["arms"], reads["probes"]) == (1, 1, 1)
    assert reads["logs"] <= 1  # only where an arm failed


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
