"""`orchestrator probe --script FILE`: a user's own probe script, unmodified, run in an arm's image (Docker) or
under its interpreter (a local process), with the arm's environment and GPUs, `repeats` times; recorded as rows
of the `scripts` table (one per run: stdout, stderr tail, exit status, the digests it printed) and RUN/script.md.

The script's text travels inside the one-shot's command (probes/script_runner.py writes it read-only in a
temporary folder of the image): nothing of the host is mounted, and the path comes from the command line only,
never from a shared config, so no config can make the orchestrator run code.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import probes
from orchestrator.analysis.script_digests import read_digests
from orchestrator.config.locations import PROJECT_ROOT
from orchestrator.config.probe import ProbeConfig
from orchestrator.errors import ConfigError, RuntimeFailure
from orchestrator.record.paths import RunPaths, atomic_write_text
from orchestrator.run.kernel_probes import Where, where
from orchestrator.runtime.spec import Mount, Runtime, run_labels

MAX_SCRIPT_BYTES = 96 * 1024  # it travels as one argument of the one-shot's command (Linux: 128 KiB at most)
CONTEND = ("process",)  # a script's own process cannot host a second stream of ours


@dataclass(frozen=True)
class Script:
    """The script as given on the command line: its file name, text and sha256."""

    name: str
    text: bytes
    sha256: str


def read_script(path: Path) -> Script:
    """The script at `path` (relative to the working directory), or one ConfigError line."""
    if not path.is_file():
        raise ConfigError(f"--script {path}: no such file; give the path of a Python script to run in the arm")
    text = path.read_bytes()
    if len(text) > MAX_SCRIPT_BYTES:
        raise ConfigError(f"--script {path}: {len(text)} bytes, more than the {MAX_SCRIPT_BYTES} a script can "
                          "travel in a one-shot's command; split it, or probe with a smaller driver script")
    return Script(path.name, text, hashlib.sha256(text).hexdigest())


def check_options(repeats: int, contend: str | None) -> None:
    problems = [f"--repeats {repeats}: must be >= 1"] if repeats < 1 else []
    if contend is not None and contend not in CONTEND:
        problems.append(f"--contend {contend}: a script runs contended by {', '.join(CONTEND)} only (a second "
                        "stream would have to run inside the script's own process)")
    if problems:
        raise ConfigError(problems)


@dataclass
class ScriptRun:
    """What `orchestrator probe --script` made: where it is recorded, and one row per run of the script."""

    paths: RunPaths
    rows: list[dict[str, Any]]


def arm_env(config: ProbeConfig) -> dict[str, str]:
    """The arm's environment, as its runs get it: its env, and its secret_env names copied from this host's."""
    arm = config.of_arm.arm if config.of_arm else None
    if arm is None:
        return dict(config.env)
    return {**config.env, **arm.env, **{n: os.environ[n] for n in arm.secret_env if n in os.environ}}


def arm_mounts(config: ProbeConfig, local: bool) -> list[Mount]:
    """The arm's volumes, in its container (a local process reads the host's files where they are)."""
    arm = config.of_arm.arm if config.of_arm and not local else None
    return [Mount(v.host, v.container, v.read_only) for v in arm.volumes] if arm else []


def run_script(script: Script, config: ProbeConfig, runtime: Runtime, local: bool, repeats: int,
               contend: str | None, timeout_s: float, out: Path | None) -> ScriptRun:
    """Run the script `repeats` times where the probe config says (`kernel_probes.where`), record the rows."""
    at = where(config, runtime, local)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    study = Path(script.name).stem
    paths = RunPaths(out or PROJECT_ROOT / "runs" / "probes" / f"script-{study}-{stamp}")
    run_id = f"probe-script-{study}-{stamp}-{os.getpid()}"
    spec = {"name": script.name, "source_z64": base64.b64encode(zlib.compress(script.text)).decode("ascii"),
            "repeats": repeats, "timeout_s": timeout_s, "contend": contend}
    result = runtime.run_oneshot(at.identity, ["-c", probes.bundle("script_runner"), "--spec", json.dumps(spec)],
                                 run_labels(run_id, purpose="script"), [at.python], repeats * timeout_s + 120,
                                 env=arm_env(config), gpus=at.gpus, mounts=arm_mounts(config, local))
    if result.exit_code != 0:
        raise RuntimeFailure(f"the script runner in {at.image} exited {result.exit_code}: "
                             f"{result.output.strip()[-2000:]}")
    rows = rows_from_output(result.output, script, study, run_id, at)
    paths.root.mkdir(parents=True, exist_ok=True)
    record(paths, rows, result.output)
    return ScriptRun(paths, rows)


def rows_from_output(output: str, script: Script, study: str, run_id: str, at: Where) -> list[dict[str, Any]]:
    """One `scripts` row per run the runner printed, with the digests read from its stdout."""
    lines = [json.loads(ln) for ln in output.splitlines() if ln.startswith("{")]
    done: dict[str, Any] = next((ln for ln in lines if ln.get("kind") == "done"), {})
    rows = []
    for run in (ln for ln in lines if ln.get("kind") == "run"):
        digests = read_digests(run["stdout"])
        rows.append({"study": study, "run_id": run_id, "image": at.image, "image_id": at.identity,
                     "script": script.name, "script_sha256": script.sha256, "repeat": run["repeat"],
                     "exit_code": run["exit_code"], "wall_s": run["wall_s"], "stdout": run["stdout"],
                     "stderr_tail": run["stderr_tail"], "digest_names": [n for n, _ in digests],
                     "digest_values": [v for _, v in digests], "contend": done.get("contend"),
                     "contend_matmuls": done.get("contend_matmuls")})
    return rows


def record(paths: RunPaths, rows: list[dict[str, Any]], output: str) -> None:
    """The runner's raw output (RUN/script-raw-N.jsonl), the rows appended to the scripts table, RUN/script.md
    from every script row the run dir holds."""
    from orchestrator.record.tables import TableWriter, read_table
    from orchestrator.report.script_probe import render_script

    index = 1 + len(list(paths.root.glob("script-raw-*.jsonl")))
    atomic_write_text(paths.root / f"script-raw-{index}.jsonl", output)
    with TableWriter(paths, "scripts", "scripts", flush_rows=4096, flush_s=3600) as writer:
        for row in rows:
            writer.append(row)
    atomic_write_text(paths.root / "script.md", render_script(read_table(paths, "scripts").to_pylist()))
