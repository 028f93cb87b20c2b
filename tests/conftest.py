"""Shared fixtures. Docker tests need a reachable engine: skipped locally without one, but under CI
(CI=true) they fail, so a CI run can never pass without exercising the real thing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LABEL = "org.orchestrator.run"


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        message = f"no Docker host reachable ({exc}); run `make setup`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true requires Docker: {message}")
        pytest.skip(message)
    return client


@pytest.fixture()
def no_leftover_containers(docker_client) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Fail a test that leaves any container of a run behind (labels name every one we create). A container
    whose owner process still lives belongs to a run going on beside this test (another test session), not
    to a leftover."""
    before = {c.id for c in labelled(docker_client)}
    yield
    after = labelled(docker_client)
    left = [c for c in after if c.id not in before and not _owner_alive(c.labels)]
    for container in left:
        container.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def labelled(docker_client) -> list[Any]:  # type: ignore[no-untyped-def]
    """Every container of a run. The SDK inspects each one it lists: a container removed in between (a run beside
    this test stopping) is a 404 there (CI: 'No such container' in this fixture), and the list is asked again."""
    import docker

    for _ in range(5):
        try:
            return list(docker_client.containers.list(all=True, filters={"label": LABEL}))
        except docker.errors.NotFound:
            continue
    return list(docker_client.containers.list(all=True, filters={"label": LABEL}))


def _owner_alive(labels: dict[str, str]) -> bool:
    from orchestrator.runtime.host import OWNER_PID, owner_alive

    return labels.get(OWNER_PID) != str(os.getpid()) and owner_alive(labels) is True


# Engines built into the cache dir by `make vllm-cpu` / `make transformers-serve` (scripts/engine-build.sh).
CACHE = Path(os.environ.get("ORCHESTRATOR_CACHE_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator")


def require_engine_build(venv_python: Path, make_target: str, engine: str) -> None:
    """Skip unless `make TARGET` built the engine's venv and the tiny models; under CI=true, fail instead."""
    missing = [what for what, ok in ((f"the {engine} venv", venv_python.is_file()),
                                     ("the tiny models", (CACHE / "models" / "tiny-llama").is_dir())) if not ok]
    if missing:
        message = f"{' and '.join(missing)} not built: run `make {make_target}`"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true requires {engine}: {message}")
        pytest.skip(message)


def orchestrator(*args: str, timeout_s: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout_s, **kwargs)


def ran(tmp_path_factory: pytest.TempPathFactory, label: str, *args: str, timeout_s: float = 600) -> Path:
    """`orchestrator run ARGS` into a fresh run dir (tmp/LABEL*/run), which it must finish with exit 0."""
    run_dir = tmp_path_factory.mktemp(label) / "run"
    result = orchestrator("run", f"hydra.run.dir={run_dir}", *args, timeout_s=timeout_s)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def interrupt(proc: subprocess.Popen[str], timeout_s: float = 60) -> str:
    """Ctrl-C a running `orchestrator run` and wait for it; returns its stderr (killed if it hangs)."""
    import signal

    try:
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=timeout_s)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
