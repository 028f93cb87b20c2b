"""Model and revision in the matrix key: the model an arm serves (its engine profile reads it), a hub revision
or a local folder's content hash, cached per file by size and mtime."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.engines import profile_for
from orchestrator.guard.fingerprint import arm_cell, matrix_key, matrix_material
from orchestrator.guard.model_revision import folder_hash, model_identity
from orchestrator.runtime.spec import Mount


def key(cell: dict[str, object]) -> str:
    return matrix_key("sha256:img", {"cell": cell})


def test_model_and_revision_change_the_key_and_an_arm_without_a_model_keeps_its_old_one() -> None:
    args = {"tensor-parallel-size": 2}
    before = key(arm_cell(args, "0,1", "vllm"))
    assert "model" not in matrix_material("sha256:img", {"cell": arm_cell(args, "0,1", "vllm")})
    one = key(arm_cell(args, "0,1", "vllm", "org/m", "abc123"))
    assert len({before, one, key(arm_cell(args, "0,1", "vllm", "org/m", "def456")),
                key(arm_cell(args, "0,1", "vllm", "org/other", "abc123")),
                key(arm_cell(args, "0,1", "vllm", "org/m", None))}) == 5
    assert one == key(arm_cell(args, "0,1", "vllm", "org/m", "abc123"))
    assert matrix_material("sha256:img", {"cell": arm_cell(args, None, "vllm", "org/m")})["model_revision"] is None


def test_the_engine_profile_names_the_model() -> None:
    vllm, serve = profile_for("vllm"), profile_for("transformers_serve")
    assert vllm.model({"model": "org/m"}) == "org/m" and vllm.model({"model_tag": "org/t"}) == "org/t"
    assert vllm.model({}, ["vllm", "serve", "org/c", "--port", "8000"]) == "org/c"
    assert vllm.model({}, ["python3", "my_server.py", "serve", "x"]) is None  # not the engine's own program
    assert serve.model({"model": "/models/tiny"}) == "/models/tiny"
    assert profile_for("reference").model({"served-model-name": "reference"}) is None


def test_a_folder_hash_is_of_names_sizes_and_contents_and_cached_by_size_and_mtime(tmp_path: Path) -> None:
    model, cache = tmp_path / "model", tmp_path / "cache"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin").write_bytes(b"\0" * 1000)
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("changes every download")
    first = folder_hash(model, cache)
    assert first.startswith("sha256:") and len(first) == 71 and folder_hash(model, cache) == first
    weights = model / "sub" / "weights.bin"
    stat = weights.stat()
    weights.write_bytes(b"\1" * 1000)  # same size; mtime put back: the cache is trusted, nothing is read
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert folder_hash(model, cache) == first
    assert folder_hash(model, tmp_path / "fresh") != first  # no cache: the content is read
    weights.write_bytes(b"\1" * 1001)  # another size: read again
    grown = folder_hash(model, cache)
    assert grown != first and grown == folder_hash(model, tmp_path / "fresh2")
    (model / ".cache" / "lock").write_text("another")
    assert folder_hash(model, cache) == grown  # names starting with '.' are skipped
    weights.rename(model / "sub" / "renamed.bin")
    assert folder_hash(model, cache) != grown  # names count


def test_model_identity_hashes_a_mounted_or_local_folder_else_takes_the_hub_revision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    vllm = profile_for("vllm")
    mounts = [Mount(str(tmp_path / "models"), "/models")]
    model, revision = model_identity(vllm, {"model": "/models/tiny"}, [], mounts, process=False)
    assert model == "/models/tiny" and revision == folder_hash(tmp_path / "models" / "tiny")
    assert model_identity(vllm, {"model": str(tmp_path / "models" / "tiny")}, [], [], process=True)[1] == revision
    # in a container, a path outside its mounts lies in its image: the image id says what it is
    assert model_identity(vllm, {"model": str(tmp_path / "models" / "tiny")}, [], [], process=False) == \
        (str(tmp_path / "models" / "tiny"), None)
    assert model_identity(vllm, {"model": "org/m", "revision": "abc"}, [], mounts, process=False) == ("org/m", "abc")
    assert model_identity(vllm, {"model": "org/m"}, [], mounts, process=True) == ("org/m", None)
    assert model_identity(vllm, {}, [], mounts, process=True) == (None, None)
