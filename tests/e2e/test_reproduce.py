"""`orchestrator reproduce`: a deterministic run reproduces, a nondeterministic one differs, someone
else's hostile config is refused, a missing original image is named, a re-run that could not answer is
not called "differs"; `run --from` and Hydra's re-run recipe write where Hydra's output overrides say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml  # type: ignore[import-untyped]

from tests.conftest import orchestrator

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client", "no_leftover_containers")]
SMALL = ["protocol=probe", "protocol.phases.sequential.repeats=3"]


@pytest.fixture(scope="module")
def deterministic_run(tmp_path_factory: pytest.TempPathFactory, docker_client) -> Path:  # type: ignore[no-untyped-def]
    run_dir = tmp_path_factory.mktemp("orig") / "run"
    result = orchestrator("run", f"hydra.run.dir={run_dir}", "~arms.wide_batch", *SMALL)
    assert result.returncode == 0, result.stderr[-2000:]
    return run_dir


def test_deterministic_run_reproduces(deterministic_run: Path, tmp_path: Path) -> None:
    result = orchestrator("reproduce", str(deterministic_run), "--out", str(tmp_path / "again"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "verdict: reproduced (2 cells)" in result.stdout
    verdict = json.loads((tmp_path / "again" / "reproduce.json").read_text())
    assert verdict["reproduced"] is True
    original_id = pq.read_table(deterministic_run / "data" / "arms").column("image_id")[0].as_py()
    assert pq.read_table(tmp_path / "again" / "data" / "arms").column("image_ref")[0].as_py() == original_id


def test_nondeterministic_run_differs(tmp_path: Path) -> None:
    orchestrator("run", f"hydra.run.dir={tmp_path / 'orig'}", "study=fused_finalize", *SMALL)
    result = orchestrator("reproduce", str(tmp_path / "orig"), "--out", str(tmp_path / "again"))
    assert result.returncode == 3, result.stderr[-2000:]
    assert "verdict: differs (2 of 4 cells)" in result.stdout
    assert "differs    fused/capital/sequential" in result.stdout
    assert "reproduced unfused/capital/sequential" in result.stdout


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def test_reproduce_writes_beside_the_run_it_was_sent_and_names_a_path_that_is_not_there(
        deterministic_run: Path, tmp_path: Path) -> None:
    missing = orchestrator("reproduce", str(tmp_path / "nope"))
    assert missing.returncode == 2 and f"error: {tmp_path / 'nope'} does not exist" in missing.stderr
    sent = _copy(deterministic_run, tmp_path / "sent")
    before = sorted(p.relative_to(sent) for p in sent.rglob("*"))
    result = orchestrator("reproduce", str(sent))
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.relative_to(sent) for p in sent.rglob("*")) == before  # the folder sent stays as it came
    [beside] = tmp_path.glob("sent-reproduce-*")
    assert json.loads((beside / "reproduce.json").read_text())["reproduced"] is True


def test_hostile_config_is_refused_naming_option_and_flag(deterministic_run: Path, tmp_path: Path) -> None:
    hostile = _copy(deterministic_run, tmp_path / "hostile")
    saved = hostile / ".hydra" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    config["arms"]["baseline"].update(privileged=True, volumes=[{"host": "/", "container": "/host"}])
    config["runtime"]["allow"] = ["privileged", "host_root_mount"]  # the file's own allow does not count
    saved.write_text(yaml.safe_dump(config))
    result = orchestrator("reproduce", str(hostile), "--out", str(tmp_path / "never"))
    assert result.returncode == 2
    assert "arms.baseline.privileged=true is a dangerous container option (privileged)" in result.stderr
    assert "--allow privileged" in result.stderr and "--allow host_root_mount" in result.stderr
    assert not (tmp_path / "never" / "data").exists()


def test_own_config_needs_runtime_allow() -> None:
    result = orchestrator("run", "~arms.wide_batch", "arms.baseline.privileged=true")
    assert result.returncode == 2 and "runtime.allow=[privileged]" in result.stderr


def test_missing_original_image_is_named(deterministic_run: Path, tmp_path: Path) -> None:
    copy = _copy(deterministic_run, tmp_path / "copy")
    for part in (copy / "data" / "arms").glob("*.parquet"):
        table = pq.read_table(part)
        fake = pa.array(["sha256:" + "0" * 64] * table.num_rows)
        pq.write_table(table.set_column(table.schema.get_field_index("image_id"), "image_id", fake), part)
    result = orchestrator("reproduce", str(copy), "--out", str(tmp_path / "never"))
    assert result.returncode == 4
    assert "the original image sha256:000" in result.stderr and "docker load" in result.stderr


def test_a_rerun_goes_where_hydras_output_overrides_say_and_nothing_else_changes(deterministic_run: Path,
                                                                                 tmp_path: Path) -> None:
    ran = orchestrator("run", "--from", str(deterministic_run), f"hydra.run.dir={tmp_path / 'from'}")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads((tmp_path / "from" / "run.json").read_text())["from"] == str(deterministic_run)
    recipe = orchestrator("run", "--config-dir", str(deterministic_run / ".hydra"), "--config-name", "config",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra.sweep.subdir=again")
    assert recipe.returncode == 0, recipe.stderr[-2000:]
    assert (tmp_path / "sweep" / "again" / "report.json").is_file()
    changed = orchestrator("run", "--from", str(deterministic_run), "protocol=smoke",
                           f"hydra.run.dir={tmp_path / 'never'}")
    assert changed.returncode == 2 and changed.stderr.count("\n") == 1 and "is a recorded run" in changed.stderr
    assert not (tmp_path / "never").exists()
    again = orchestrator("run", "--from", str(tmp_path / "sweep" / "again"), f"hydra.run.dir={tmp_path / 'from'}")
    assert again.returncode == 2 and "holds no run yet (it has run.json" in again.stderr  # never mixed into it


def test_a_rerun_dir_is_a_run_dir_itself(deterministic_run: Path, tmp_path: Path) -> None:
    """What `run --from` and `reproduce` write re-runs and reproduces as a run of `run` does (its .hydra)."""
    first = orchestrator("run", "--from", str(deterministic_run), f"hydra.run.dir={tmp_path / 'first'}")
    assert first.returncode == 0, first.stderr[-2000:]
    recorded = yaml.safe_load((tmp_path / "first" / ".hydra" / "config.yaml").read_text())
    assert recorded["study"]["name"] == "default" and list(recorded["arms"]) == ["baseline"]
    second = orchestrator("reproduce", str(tmp_path / "first"), "--out", str(tmp_path / "second"))
    assert second.returncode == 0 and "verdict: reproduced (2 cells)" in second.stdout, second.stderr[-2000:]
    third = orchestrator("run", "--config-dir", str(tmp_path / "second" / ".hydra"), "--config-name", "config",
                         f"hydra.run.dir={tmp_path / 'third'}")
    assert third.returncode == 0, third.stderr[-2000:]
    image = yaml.safe_load((tmp_path / "second" / ".hydra" / "config.yaml").read_text())["arms"]["baseline"]["image"]
    assert image.startswith("sha256:")  # reproduce records the config as it ran: images pinned by id


def test_a_rerun_that_could_not_answer_is_not_reproduced_and_never_differs(deterministic_run: Path,
                                                                            tmp_path: Path) -> None:
    slow = _copy(deterministic_run, tmp_path / "slow")
    saved = slow / ".hydra" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    config["arms"]["baseline"]["startup_timeout_s"] = 0.001  # valid, and no engine is ready that soon
    saved.write_text(yaml.safe_dump(config))
    result = orchestrator("reproduce", str(slow), "--out", str(tmp_path / "again"))
    assert result.returncode == 4, result.stdout + result.stderr[-2000:]
    assert "verdict: not reproduced: the re-run did not answer (2 of 2 cells not re-run)" in result.stdout
    assert "differs" not in result.stdout
