"""Composed configs kept between runs (config/compose_cache.py): the same config as composing it afresh, composed
again when anything it reads changed, and a file another user could have written is not read."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator import config
from orchestrator.config import compose_cache
from orchestrator.config.compose import compose_collecting


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "composed"


def user_dir(root: Path, max_tokens: int) -> Path:
    (root / "protocol").mkdir(parents=True, exist_ok=True)
    (root / "protocol" / "mine.yaml").write_text(
        f"defaults:\n  - smoke\n  - _self_\nname: mine\nrequest:\n  max_tokens: {max_tokens}\n")
    return root


def test_a_kept_config_is_the_config_composed_afresh(cache: Path) -> None:
    overrides = ["protocol=smoke", "arms.baseline.engine_args.max-num-seqs=2"]
    first = config.compose(overrides)
    assert len(list(cache.glob("*.pickle"))) == 1
    again = config.compose(overrides)  # from the cache
    assert again is not first and OmegaConf.to_yaml(again) == OmegaConf.to_yaml(first)
    assert OmegaConf.get_type(again.arms.baseline) is OmegaConf.get_type(first.arms.baseline)
    assert OmegaConf.is_struct(again) and again.hydra.runtime.cwd == os.getcwd()
    assert config.to_typed(again) == config.to_typed(first)


def test_anything_composition_reads_changes_the_key(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    mine = user_dir(tmp_path / "mine", 7)
    assert config.compose(["protocol=mine"], [mine]).protocol.request.max_tokens == 7
    user_dir(mine, 9)  # the user edits their file
    assert config.compose(["protocol=mine"], [mine]).protocol.request.max_tokens == 9
    base = compose_cache.key(["protocol=mine"], [mine])
    assert compose_cache.key(["protocol=mine", "seed=1"], [mine]) != base
    monkeypatch.chdir(tmp_path)
    assert compose_cache.key(["protocol=mine"], [mine]) != base  # hydra.runtime.cwd


def test_a_config_with_problems_is_not_kept(cache: Path) -> None:
    _, problems = compose_collecting(["protocol=smoke", "nope=1"])
    assert problems and not list(cache.glob("*.pickle"))


def test_a_file_others_may_write_or_a_broken_one_is_not_read(cache: Path) -> None:
    config.compose(["protocol=smoke"])
    [kept] = cache.glob("*.pickle")
    name = kept.stem
    assert compose_cache.load(cache, name) is not None
    kept.chmod(0o666)
    assert compose_cache.load(cache, name) is None
    kept.chmod(0o600)
    kept.write_bytes(pickle.dumps({"not": "a config"}))
    assert compose_cache.load(cache, name) is None
    kept.write_bytes(b"garbage")
    assert compose_cache.load(cache, name) is None
    assert config.compose(["protocol=smoke"]).protocol.name == "smoke"  # composed again, and kept again
    assert compose_cache.load(cache, name) is not None


def test_a_run_dir_is_put_back_where_hydra_put_it(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    overrides = [f"hydra.run.dir={tmp_path}/b", "protocol=smoke"]
    config.compose([f"hydra.run.dir={tmp_path}/a", "protocol=smoke"])
    again = config.compose(overrides)  # the same entry, this run's dir put in
    assert len(list(cache.glob("*.pickle"))) == 1
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "another"))
    fresh = config.compose(overrides)
    assert again.hydra.run.dir == f"{tmp_path}/b" and OmegaConf.to_yaml(again) == OmegaConf.to_yaml(fresh)


@pytest.mark.parametrize("value", ["'/tmp/a b'", "${oc.env:HOME}/x", "null", "1e3", "a,b", "-nan", "+NaN", "1_0"])
def test_a_run_dir_hydra_would_read_as_something_else_stays_in_the_key(value: str) -> None:
    keyed, named = compose_cache.run_dirs([f"hydra.run.dir={value}"])
    assert keyed == [f"hydra.run.dir={value}"] and named == {}


def test_a_linked_folder_in_a_config_dir_is_read_through(cache: Path, tmp_path: Path) -> None:
    elsewhere = user_dir(tmp_path / "elsewhere", 7)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "protocol").symlink_to(elsewhere / "protocol")  # Hydra follows it
    assert config.compose(["protocol=mine"], [mine]).protocol.request.max_tokens == 7
    user_dir(elsewhere, 9)
    assert config.compose(["protocol=mine"], [mine]).protocol.request.max_tokens == 9


def test_the_key_covers_the_whole_package(cache: Path) -> None:
    package = compose_cache.PACKAGE
    read = set(compose_cache._files(package))
    assert package / "engines" / "__init__.py" in read and package / "config" / "schema.py" in read


def test_a_kept_config_resolves_in_a_fresh_process(cache: Path) -> None:
    """A run reads the kept config in a new process, before anything composed there: the `${on_off:X}` of an
    arm's description must resolve then too (on the H100 the second `locate_tiny` run failed with 'Unsupported
    interpolation type on_off')."""
    import subprocess
    import sys

    script = ("import sys; from omegaconf import OmegaConf; from orchestrator import config; "
              "c = config.compose(['study=locate_tiny']); "
              "print(OmegaConf.to_container(c.arms, resolve=True)['invariant']['description'])")
    outputs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
               for _ in range(2)]
    assert len(list(cache.glob("*.pickle"))) == 1
    for done in outputs:
        assert done.returncode == 0, done.stderr
    assert outputs[0].stdout == outputs[1].stdout and " on" in outputs[0].stdout
