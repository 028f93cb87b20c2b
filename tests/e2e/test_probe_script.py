"""`orchestrator probe --script`: a user's own script run unmodified, from the user's working directory, as the
reference engine's process arm (its interpreter and env) and in the reference engine's image; its digest lines
recorded in the scripts table, the report saying whether the repeats printed the same digests; bad input one
line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.e2e.test_probes import docker

# A user's hash loop, as it would be written without the orchestrator in mind: torch, hashlib, print.
DETERMINISTIC = '''import hashlib, os, sys
import torch
torch.manual_seed(0)
x = torch.randn(32, 64)
w = torch.randn(64, 64)
for layer in range(2):
    x = torch.tanh(x @ w)
    print(f"layer {layer}:", hashlib.sha256(x.numpy().tobytes()).hexdigest())
print("PYTHONPATH", os.environ.get("PYTHONPATH"))
print("MODE", oct(os.stat(__file__).st_mode & 0o777), __file__)
'''
RANDOM = '''import hashlib, os
print("DIGEST noise", hashlib.sha256(os.urandom(16)).hexdigest())
print(hashlib.sha256(b"fixed").hexdigest())
'''


def probe(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The verb as a user runs it, from their own directory (paths relative to it)."""
    return subprocess.run([sys.executable, "-m", "orchestrator", "probe", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def rows(out: Path) -> list[dict[str, object]]:
    return sorted(pq.read_table(out / "data" / "scripts").to_pylist(), key=lambda r: int(r["repeat"]))  # type: ignore[arg-type]


@pytest.fixture()
def scripts(tmp_path: Path) -> Path:
    (tmp_path / "det.py").write_text(DETERMINISTIC)
    (tmp_path / "rand.py").write_text(RANDOM)
    return tmp_path


def test_a_script_runs_unchanged_as_the_process_arm_and_its_digests_agree(scripts: Path) -> None:
    pytest.importorskip("torch")
    result = probe(scripts, "--script", "det.py", "--arm", "reference_process", "--local", "--repeats", "3",
                   "--out", "out")
    assert result.returncode == 0, result.stderr[-3000:]
    ran = rows(scripts / "out")
    assert [r["repeat"] for r in ran] == [1, 2, 3] and all(r["exit_code"] == 0 for r in ran)
    assert all(r["digest_names"] == ["layer 0", "layer 1"] for r in ran)
    assert len({tuple(r["digest_values"]) for r in ran}) == 1  # type: ignore[arg-type]
    first = str(ran[0]["stdout"])
    assert "PYTHONPATH arms/reference-engine" in first  # the arm's env
    assert "MODE 0o444 /tmp/user-probe-" in first and str(scripts) not in first  # a read-only copy, not the user's file
    assert ran[0]["image_id"].startswith("process:sha256:") and ran[0]["contend"] is None  # type: ignore[union-attr]
    report = (scripts / "out" / "script.md").read_text()
    assert "Digests across 3 repeats: identical (2 digests)" in report and report in result.stdout


def test_a_script_printing_a_fresh_digest_each_run_reads_not_identical(scripts: Path) -> None:
    result = probe(scripts, "--script", "rand.py", "--local", "--repeats", "3", "--contend", "process",
                   "--out", "out")
    assert result.returncode == 0, result.stderr[-3000:]
    ran = rows(scripts / "out")
    assert all(r["digest_names"] == ["noise", "digest"] for r in ran)
    assert len({r["digest_values"][0] for r in ran}) == 3  # type: ignore[index]
    assert len({r["digest_values"][1] for r in ran}) == 1  # type: ignore[index]
    assert all(r["contend"] == "process" and int(r["contend_matmuls"]) >= 1 for r in ran)  # type: ignore[call-overload]
    assert "Digests across 3 repeats: not identical (1 of 2 digests differ: noise)" in result.stdout


def test_a_failing_script_is_recorded_with_its_stderr_and_exit_4(scripts: Path) -> None:
    (scripts / "fails.py").write_text("import sys\nprint('DIGEST x ' + 'ab' * 16)\nsys.exit('no GPU here')\n")
    result = probe(scripts, "--script", "fails.py", "--local", "--repeats", "1", "--out", "out")
    assert result.returncode == 4, result.stderr[-3000:]
    (run,) = rows(scripts / "out")
    assert run["exit_code"] == 1 and "no GPU here" in str(run["stderr_tail"]) and run["digest_names"] == ["x"]
    assert "exited non-zero in 1 of 1 runs" in result.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--script", "missing.py", "--arm", "reference_process", "--local"], "--script missing.py: no such file"),
    (["--script", "det.py", "--arm", "refrence_process", "--local"], "Did you mean 'reference_process'?"),
    (["--script", "det.py", "--local", "--repeats", "0"], "--repeats 0: must be >= 1"),
    (["--script", "det.py", "--local", "--contend", "stream"], "--contend stream: a script runs contended by"),
    (["--script", "det.py"], "the probe needs an image"),
])
def test_bad_input_is_one_line_and_exit_2(scripts: Path, args: list[str], says: str) -> None:
    result = probe(scripts, *args, "--out", "out")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert not (scripts / "out").exists()


@docker
def test_a_script_runs_unchanged_in_the_reference_image(scripts: Path) -> None:
    result = probe(scripts, "--script", "det.py", "--arm", "reference", "--repeats", "2", "--out", "out")
    assert result.returncode == 0, result.stderr[-3000:]
    ran = rows(scripts / "out")
    assert all(r["image"] == "orchestrator/reference-engine:0.1.0" and str(r["image_id"]).startswith("sha256:")
               for r in ran)
    assert all(r["exit_code"] == 0 and r["digest_names"] == ["layer 0", "layer 1"] for r in ran)
    assert "MODE 0o444 /tmp/user-probe-" in str(ran[0]["stdout"])  # copied into the container, not mounted
    assert "Digests across 2 repeats: identical (2 digests)" in (scripts / "out" / "script.md").read_text()


@docker
def test_a_script_in_an_image_gets_the_arm_s_env_and_volumes(scripts: Path) -> None:
    """An arm of the user's config dir: the reference image, an env var and a read-only volume it declares."""
    (scripts / "data").mkdir()
    (scripts / "data" / "weights.bin").write_bytes(b"\x00\x01" * 1000)
    (scripts / "conf" / "arm").mkdir(parents=True)
    (scripts / "conf" / "arm" / "mine.yaml").write_text(
        "defaults:\n  - reference\n  - _self_\nenv:\n  MY_SETTING: 'on'\n"
        f"volumes:\n  - {{host: {scripts / 'data'}, container: /weights}}\n")
    (scripts / "reads.py").write_text("import hashlib, os\n"
                                      "print('weights', hashlib.sha256(open('/weights/weights.bin', 'rb').read())"
                                      ".hexdigest())\nprint('MY_SETTING', os.environ.get('MY_SETTING'))\n")
    result = probe(scripts, "--config-dir", "conf", "--script", "reads.py", "--arm", "mine", "--repeats", "1",
                   "--out", "out")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = rows(scripts / "out")
    import hashlib

    assert run["digest_values"] == [hashlib.sha256(b"\x00\x01" * 1000).hexdigest()]
    assert "MY_SETTING on" in str(run["stdout"])
