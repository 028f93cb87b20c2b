"""`orchestrator bundle RUN`: a run handed on as one file (record/bundle.py writes and checks the zip). It holds
the run dir (the composed config in .hydra/, prompts.json, the record's tables: raw responses and the engines'
logs, run.json, guard.json, the reports; not scratch/, the arms' caches) and what the run dir lacks: each arm's
build context as it is now (a Docker arm's Dockerfile and patches, a process arm's code, RunPaths.bundle_context)
and bundle.json (the exact commands, each arm's identity, fingerprint and the contexts' digests). No secret goes
in: a member that holds the value of an env var the record redacted is refused in one line.

`opened(PATH)`: where `run --from`, `reproduce` and `compare` take a run dir, a bundle file is verified and
unpacked into the user's cache first (bundles/), and the unpacked run dir is what they read."""

from __future__ import annotations

import json
import os
import platform
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from orchestrator import __version__
from orchestrator.config.compose import user_cache_dir
from orchestrator.console import Outcome, answer, note
from orchestrator.errors import ConfigError, RecordError, counted
from orchestrator.record import bundle as archive
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import ArmStart, RecordedRun, read_run
from orchestrator.runtime.host import tree_files, tree_hash
from orchestrator.runtime.spec import REDACTED

FORMAT = 1  # bundle.json's layout
MAX_CONTEXT_BYTES = 256 << 20  # an arm's build context in a bundle (a source tree, not a model's weights)
SKIPPED = ("scratch", "bundle")  # the arms' caches; what a bundle adds (made again, never nested)


def opened(path: Path) -> tuple[Path, Path | None]:
    """(the run dir, the bundle it was unpacked from, or None): a run dir stays as it is; a file is a bundle,
    verified and unpacked (record/bundle.py: once per content, under the user's cache)."""
    if not path.is_file():
        return path, None
    return archive.unpack(path, user_cache_dir() / "bundles").root, path.resolve()


def _run_files(paths: RunPaths) -> dict[str, Path]:
    """The run dir's plain files by relative path (links and what SKIPPED names left out)."""
    found = {}
    for path in sorted(paths.root.rglob("*")):
        rel = path.relative_to(paths.root)
        if rel.parts[0] not in SKIPPED and path.is_file() and not path.is_symlink():
            found[rel.as_posix()] = path
    return found


def _context(paths: RunPaths, start: ArmStart) -> tuple[Path | None, dict[str, Any]]:
    """An arm's build context as its record names it (the absolute path the run used), and what bundle.json
    says of it; None when the arm names none or it is not on this machine any more."""
    recorded = (start.config.get("build") or {}).get("context")
    if not recorded:
        return None, {"recorded": None}
    source = Path(recorded)
    if not source.is_dir() and paths.bundle_context(start.arm).is_dir():  # a bundle's run dir, bundled again
        source = paths.bundle_context(start.arm)
    if not source.is_dir():
        return None, {"recorded": recorded, "bundled": False,
                      "why": "not on the machine that made the bundle (moved or removed since the run)"}
    files = tree_files(source)
    if (total := sum(path.stat().st_size for _, path in files)) > MAX_CONTEXT_BYTES:
        raise ConfigError(f"arm '{start.arm}': its build context {source} holds {total >> 20} MiB, more than a bundle "
                          f"takes ({MAX_CONTEXT_BYTES >> 20} MiB): point build.context at the folder the image is "
                          "built from (a Dockerfile and its patches), and run again")
    return source, {"recorded": recorded, "bundled": True, "files": len(files),
                    "sha256": tree_hash(source, MAX_CONTEXT_BYTES),
                    "in_bundle": paths.bundle_context(start.arm).relative_to(paths.root).as_posix()}


def _secrets(starts: list[ArmStart]) -> dict[str, str]:
    """{value: name} of every env var the record redacted (an arm's secret_env, or a name the environment probe
    took for a secret), from the arm's config and this environment: none of them may go in."""
    names: set[str] = set()
    for start in starts:
        names.update(start.config.get("secret_env") or [])
        probed = ((start.fingerprint or {}).get("probe") or {}).get("env") or {}
        names.update(name for name, value in probed.items() if value == REDACTED)
    found = {}
    for start in starts:
        for name in names:
            for value in ((start.config.get("env") or {}).get(name), os.environ.get(name)):
                if isinstance(value, str) and len(value) >= 6 and value != REDACTED:
                    found[value] = name
    return found


def _refuse_secrets(paths: RunPaths, members: dict[str, Path | bytes], secrets: dict[str, str]) -> None:
    for name, source in members.items():
        data = source if isinstance(source, bytes) else source.read_bytes()
        for value, env in secrets.items():
            if value.encode() in data:
                where = source if isinstance(source, Path) else paths.root / name
                raise ConfigError(f"{where} holds the value of {env}, which the record redacts: a bundle never holds "
                                  f"a secret; give it to the arm through its secret_env (arms.ARM.secret_env=[{env}]), "
                                  "not its env, run again and bundle that run")


def _original_command(paths: RunPaths) -> str | None:
    """The command line that made the run, as Hydra recorded its overrides."""
    saved = paths.hydra / "overrides.yaml"
    if not saved.is_file():
        return None
    return shlex.join(["orchestrator", "run", *map(str, OmegaConf.load(saved))])


def _bundle_json(paths: RunPaths, run: RecordedRun, starts: list[ArmStart], contexts: dict[str, dict[str, Any]],
                 dest: Path, rerunnable: bool) -> bytes:
    return (json.dumps({
        "format": FORMAT, "run": paths.root.name, "run_id": run.meta.run_id, "study": run.meta.study,
        "made": datetime.now(UTC).isoformat(timespec="seconds"),
        "made_with": {"orchestrator": __version__, "python": platform.python_version(),
                      "platform": platform.platform()},
        "commands": {"original": _original_command(paths),
                     "rerun": f"orchestrator run --from {shlex.quote(dest.name)}" if rerunnable else None,
                     "reproduce": f"orchestrator reproduce {shlex.quote(dest.name)}" if rerunnable else None,
                     "compare": f"orchestrator compare {shlex.quote(dest.name)}",
                     "verify": f"unzip {shlex.quote(dest.name)} && cd {shlex.quote(paths.root.name)} && sha256sum -c "
                               f"{paths.manifest_digest.relative_to(paths.root)} && sha256sum -c "
                               f"{paths.manifest.relative_to(paths.root)}"},
        "arms": {start.arm: {"identity": start.image_id, "image_ref": start.image_ref,
                             "repo_digests": start.image_repo_digests, "matrix_key": start.matrix_key,
                             "status": start.status, "command": start.docker_run, "context": contexts[start.arm],
                             "fingerprint": start.fingerprint} for start in starts},
    }, indent=2, sort_keys=False) + "\n").encode()


def bundle(run_dir: Path, out: Path | None) -> Outcome:
    """`orchestrator bundle RUN [--out FILE]`: RUN and its arms' build contexts in one checked zip."""
    paths = RunPaths(run_dir.resolve())
    if not paths.meta.is_file():
        raise RecordError(f"{run_dir} is not a run directory (no run.json): pass the folder `orchestrator run` "
                          "printed (`orchestrator ls` lists them)")
    dest = (out or paths.root.parent / f"{paths.root.name}.bundle.zip").resolve()
    if dest.exists():
        raise ConfigError(f"{dest} exists: pass --out ANOTHER_FILE, or remove it")
    if dest.is_relative_to(paths.root):
        raise ConfigError(f"--out {dest} is inside the run dir it bundles: put the bundle outside {paths.root}")
    run = read_run(paths)
    rerunnable = not run.meta.imported  # an imported run (docs/import.md) names no command to re-run it
    starts = list({start.arm: start for start in run.starts}.values())  # each arm's last start
    members: dict[str, Path | bytes] = dict(_run_files(paths))
    contexts, lines = {}, []
    for start in starts:
        source, contexts[start.arm] = _context(paths, start)
        if source is None:
            lines.append(f"arm '{start.arm}': no build context in the bundle ("
                         f"{contexts[start.arm].get('why', 'it names none')})")
            continue
        for rel, path in tree_files(source):
            members[(paths.bundle_context(start.arm) / rel).relative_to(paths.root).as_posix()] = path
        lines.append(f"arm '{start.arm}': build context {source} ({counted(contexts[start.arm]['files'], 'file')})")
    about = _bundle_json(paths, run, starts, contexts, dest, rerunnable)
    members[paths.bundle_json.relative_to(paths.root).as_posix()] = about
    _refuse_secrets(paths, members, _secrets(starts))
    count = archive.write(paths, members, dest)
    manifest = f"{paths.root.name}/{paths.manifest.relative_to(paths.root)}"
    then = (f"re-run it anywhere: orchestrator run --from {dest}; reproduce it: orchestrator reproduce {dest}"
            if rerunnable else
            f"compare it anywhere: orchestrator compare {dest} (an imported run names no command to re-run it)")
    return note(*lines) + answer(f"Bundle: {dest} ({counted(count, 'file')}, {dest.stat().st_size >> 10} KiB, "
                                 f"checksums in {manifest})") + note(then)
