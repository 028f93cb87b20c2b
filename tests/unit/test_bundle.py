"""`orchestrator bundle`: one zip with the run, its arms' build contexts, bundle.json and a checksums manifest
(record/bundle.py, reproduce/bundle.py); a bundle that fails a check (a checksum, a member missing or extra, a
path escaping the bundle's folder) is refused in one line, exit 2, before anything is unpacked."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from orchestrator.config.schema import ArmConfig
from orchestrator.errors import ConfigError, RecordError
from orchestrator.record import bundle as archive
from orchestrator.record.paths import RunPaths
from orchestrator.reproduce.bundle import bundle, opened
from tests.recorded import noisy_study_run


@pytest.fixture
def run(tmp_path: Path) -> RunPaths:
    """A small hand-made run dir: what the archive does not read, only carries."""
    paths = RunPaths(tmp_path / "run")
    (paths.hydra).mkdir(parents=True)
    (paths.hydra / "config.yaml").write_text("study: {name: s}\n")
    paths.meta.write_text('{"run_id": "r"}\n')
    paths.table("responses").mkdir(parents=True)
    (paths.table("responses") / "a-00000.parquet").write_bytes(bytes(range(256)))
    return paths


def _write(run: RunPaths, dest: Path) -> Path:
    members: dict[str, Path | bytes] = {p.relative_to(run.root).as_posix(): p for p in run.root.rglob("*")
                                        if p.is_file()}
    archive.write(run, members, dest)
    return dest


def _rewrite(source: Path, dest: Path, change: dict[str, bytes | None], add: dict[str, bytes] | None = None) -> Path:
    """A copy of a zip with members replaced (bytes), dropped (None) or added."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w") as new:
        for name in old.namelist():
            data = change.get(name, old.read(name))
            if data is not None:
                new.writestr(name, data)
        for name, data in (add or {}).items():
            new.writestr(name, data)
    return dest


def test_the_manifest_lists_every_member_with_its_sha256_and_itself_is_checked(run: RunPaths, tmp_path: Path) -> None:
    made = _write(run, tmp_path / "b.zip")
    with zipfile.ZipFile(made) as zipped:
        names = set(zipped.namelist())
        manifest = zipped.read("run/bundle/MANIFEST.sha256")
        digest = zipped.read("run/bundle/MANIFEST.sha256.sha256").decode()
    listed = dict(line.split("  ")[::-1] for line in manifest.decode().splitlines())
    assert set(listed) == {".hydra/config.yaml", "run.json", "data/responses/a-00000.parquet"}
    manifests = {"run/bundle/MANIFEST.sha256", "run/bundle/MANIFEST.sha256.sha256"}
    assert names == {f"run/{name}" for name in listed} | manifests
    for name, sha in listed.items():
        assert sha == hashlib.sha256((run.root / name).read_bytes()).hexdigest()
    assert digest == f"{hashlib.sha256(manifest).hexdigest()}  bundle/MANIFEST.sha256\n"
    unpacked = tmp_path / "unzipped"
    zipfile.ZipFile(made).extractall(unpacked)  # the format `sha256sum -c` reads, from the run's folder
    for checked in ("bundle/MANIFEST.sha256.sha256", "bundle/MANIFEST.sha256"):
        done = subprocess.run(["sha256sum", "-c", checked], cwd=unpacked / "run", capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_same_run_bundled_twice_is_the_same_bytes(run: RunPaths, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    first = _write(run, tmp_path / "one.zip").read_bytes()
    later = time.time() + 3 * 86400  # days later: no member carries the time it was zipped
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "localtime", lambda *_: time.gmtime(later))
    assert _write(run, tmp_path / "two.zip").read_bytes() == first


def test_an_unpacked_bundle_is_the_run_dir_again_once_per_content(run: RunPaths, tmp_path: Path) -> None:
    made = _write(run, tmp_path / "b.zip")
    first = archive.unpack(made, tmp_path / "cache")
    assert first.root.name == "run" and first.root.parent.parent == tmp_path / "cache"
    for path in run.root.rglob("*"):
        if path.is_file():
            assert (first.root / path.relative_to(run.root)).read_bytes() == path.read_bytes()
    assert archive.unpack(made, tmp_path / "cache") == first
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.root.parent.name]  # no temporary left
    assert (first.manifest.read_bytes(), first.manifest_digest.is_file()) == (
        zipfile.ZipFile(made).read("run/bundle/MANIFEST.sha256"), True)  # the unpacked copy checks as the zip does
    forged = _rewrite(made, tmp_path / "forged.zip", {"run/run.json": b"{}"})  # the same manifest, a member changed
    with pytest.raises(RecordError, match=r"member 'run/run\.json' fails its checksum"):
        archive.unpack(forged, tmp_path / "cache")  # an unpacked copy is taken only for a bundle that checks


@pytest.mark.parametrize(("change", "add", "words"), [
    ({"run/run.json": b'{"run_id": "forged"}\n'}, None, "member 'run/run.json' fails its checksum"),
    ({"run/data/responses/a-00000.parquet": None}, None,
     "member 'run/data/responses/a-00000.parquet' is in the manifest but not in the bundle (1 missing)"),
    ({}, {"run/data/responses/b-00000.parquet": b"x"}, "member 'run/data/responses/b-00000.parquet' is not in the "
                                                      "manifest (1 extra)"),
    ({"run/bundle/MANIFEST.sha256": b"0" * 64 + b"  run.json\n"}, None, "the manifest's checksum fails"),
    ({"run/bundle/MANIFEST.sha256.sha256": None}, None, "run/bundle/MANIFEST.sha256.sha256 is missing"),
    ({}, {"run/../../evil.txt": b"x"}, "member 'run/../../evil.txt' would be written outside the bundle's folder"),
    ({}, {"/tmp/evil.txt": b"x"}, "member '/tmp/evil.txt' would be written outside the bundle's folder"),
    ({}, {"other/evil.txt": b"x"}, "member 'other/evil.txt' would be written outside the bundle's folder (run)"),
    ({}, {"run/run.json": b"again"}, "member 'run/run.json' comes twice"),
])
@pytest.mark.filterwarnings("ignore:Duplicate name")  # zipfile's, as the forged bundle is written
def test_a_bundle_that_fails_a_check_is_refused_in_one_line_and_nothing_is_unpacked(
        run: RunPaths, tmp_path: Path, change: dict[str, bytes | None], add: dict[str, bytes] | None,
        words: str) -> None:
    made = _write(run, tmp_path / "b.zip")
    broken = _rewrite(made, tmp_path / "broken.zip", change, add)
    with pytest.raises(RecordError) as refused:
        archive.unpack(broken, tmp_path / "cache")
    message = str(refused.value)
    assert message.startswith(f"{broken}: ") and words in message and "\n" not in message
    assert "copy it again from its source" in message and refused.value.exit_status == 2
    assert not any((tmp_path / "cache").rglob("*")) and not (tmp_path / "evil.txt").exists()


def test_a_link_and_a_file_that_is_no_zip_are_refused(run: RunPaths, tmp_path: Path) -> None:
    made = _write(run, tmp_path / "b.zip")
    link = zipfile.ZipInfo("run/data/link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    linked = tmp_path / "linked.zip"
    _rewrite(made, linked, {})
    with zipfile.ZipFile(linked, "a") as zipped:
        zipped.writestr(link, "/etc/passwd")
    with pytest.raises(RecordError, match="member 'run/data/link' is a link"):
        archive.unpack(linked, tmp_path / "cache")
    (tmp_path / "no.zip").write_text("not a zip")
    with pytest.raises(RecordError, match=r"no.zip is not a bundle, or a damaged one \(File is not a zip file\)"):
        archive.unpack(tmp_path / "no.zip", tmp_path / "cache")


def _context(arm: ArmConfig, folder: Path) -> None:
    arm.build.context = str(folder)


@pytest.fixture
def docker_context(tmp_path: Path) -> Path:
    """A Docker arm's build context with a patch, as arms/vllm-nonfused has."""
    folder = tmp_path / "engine-src"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "Dockerfile").write_text("FROM fake\nCOPY patch_fused_finalize.py /\n")
    (folder / "patch_fused_finalize.py").write_text("print('patched')\n")
    (folder / "__pycache__" / "x.pyc").write_bytes(b"cache")
    return folder


def test_bundle_holds_the_run_each_arms_build_context_and_bundle_json(
        tmp_path: Path, docker_context: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = noisy_study_run(tmp_path / "run", "r1", arm_config=lambda arm: _context(arm, docker_context))
    (paths.scratch_root / "baseline").mkdir(parents=True)
    (paths.scratch_root / "baseline" / "cache.bin").write_bytes(b"an arm's cache")
    outcome = bundle(paths.root, tmp_path / "out" / "run.zip")
    assert outcome.status == 0 and outcome.out[0].startswith(f"Bundle: {tmp_path / 'out' / 'run.zip'} (")
    with zipfile.ZipFile(tmp_path / "out" / "run.zip") as zipped:
        names = set(zipped.namelist())
        about = json.loads(zipped.read("run/bundle/bundle.json"))
    for arm in ("baseline", "wide_batch"):
        assert {f"run/bundle/contexts/{arm}/Dockerfile", f"run/bundle/contexts/{arm}/patch_fused_finalize.py"} <= names
        assert about["arms"][arm]["context"]["recorded"] == str(docker_context)
        assert about["arms"][arm]["identity"] and about["arms"][arm]["fingerprint"]
    assert not any("__pycache__" in name or "scratch" in name for name in names)
    assert {"run/run.json", "run/report.json"} <= names and any(n.startswith("run/data/logs/") for n in names)
    assert about["commands"]["reproduce"] == "orchestrator reproduce run.zip"
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    unpacked, sent = opened(tmp_path / "out" / "run.zip")
    assert sent == tmp_path / "out" / "run.zip" and unpacked.is_relative_to(tmp_path / "cache")
    patch = RunPaths(unpacked).bundle_context("baseline") / "patch_fused_finalize.py"
    assert patch.read_text() == "print('patched')\n"
    assert opened(paths.root) == (paths.root, None)  # a run dir stays as it is
    shutil.rmtree(docker_context)  # handed on again, where the context the run used is not
    assert bundle(unpacked, tmp_path / "again.zip").status == 0
    with zipfile.ZipFile(tmp_path / "again.zip") as zipped:
        assert zipped.read("run/bundle/contexts/baseline/patch_fused_finalize.py") == b"print('patched')\n"


def test_bundle_refuses_a_secret_an_existing_file_and_a_folder_that_is_no_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def secret(arm: ArmConfig) -> None:
        arm.secret_env = ["MY_TOKEN"]

    paths = noisy_study_run(tmp_path / "run", "r1", arm_config=secret)
    monkeypatch.setenv("MY_TOKEN", "hunter2-secret")
    (paths.root / "app.log").write_text("token is hunter2-secret\n")  # as a careless engine could log it
    with pytest.raises(ConfigError, match=r"run/app.log holds the value of MY_TOKEN, which the record redacts"):
        bundle(paths.root, tmp_path / "b.zip")
    assert not (tmp_path / "b.zip").exists()
    (paths.root / "app.log").write_text("")
    assert bundle(paths.root, tmp_path / "b.zip").status == 0
    with pytest.raises(ConfigError, match=r"b.zip exists: pass --out ANOTHER_FILE, or remove it"):
        bundle(paths.root, tmp_path / "b.zip")
    with pytest.raises(RecordError, match="is not a run directory"):
        bundle(tmp_path, None)


def test_a_bundle_that_would_not_fit_is_refused_before_anything_is_unpacked(run: RunPaths, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    made = _write(run, tmp_path / "b.zip")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9 - 100, 100))
    with pytest.raises(RecordError, match=r"unpack to \d+ bytes and .* has 100 free: refused, nothing unpacked"):
        archive.unpack(made, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
