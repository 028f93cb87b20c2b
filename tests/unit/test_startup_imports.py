"""What `run` imports and writes before its first engine starts (issue 35 item 9b): the knob listing's cache is
written once, when the listing is made; the Docker SDK comes without paramiko unless a host is reached over
ssh; httpx without its command-line client; asyncio only where a request is sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.guard import knobs as guard_knobs
from tests.unit.test_guard import KNOWN, listing_runtime, load

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> str:
    """stdout of `code` in a fresh interpreter (what a module imports shows only there)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_cached_knob_listing_is_read_not_written_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg = load("study=guard_finalize_only")
    written: list[Path] = []
    keep = guard_knobs.atomic_write_text
    monkeypatch.setattr(guard_knobs, "atomic_write_text", lambda path, text: (written.append(path), keep(path, text)))
    runtime, calls = listing_runtime(json.dumps(KNOWN))
    first = guard_knobs.check_knobs(cfg, runtime, "run-1")
    assert calls == [["--list-knobs"]] and len(written) == 1  # made by a container: kept once for two arms
    again = guard_knobs.check_knobs(cfg, runtime, "run-2")
    assert calls == [["--list-knobs"]] and len(written) == 1  # from the cache: no container, nothing written
    assert again == first


def test_the_docker_sdk_comes_without_paramiko_until_a_host_is_reached_over_ssh() -> None:
    out = _fresh(
        "import sys\n"
        "from orchestrator.runtime.docker_sdk import docker_sdk, link_errors\n"
        "sdk = docker_sdk(False)\n"
        "import docker.api.client as api\n"
        "print('paramiko' in sys.modules, hasattr(api, 'SSHHTTPAdapter'), len(link_errors()))\n"
        "docker_sdk(True)\n"
        "import paramiko\n"
        "print('paramiko' in sys.modules, api.SSHHTTPAdapter.__module__, paramiko.SSHException in link_errors())\n")
    assert out.splitlines() == ["False False 3", "True docker.transport.sshconn True"]


def test_an_ssh_host_imported_first_gets_the_sdks_ssh_transport() -> None:
    out = _fresh("import sys\nfrom orchestrator.runtime.docker_sdk import docker_sdk\ndocker_sdk(True)\n"
                 "import docker.api.client as api\nprint('paramiko' in sys.modules, hasattr(api, 'SSHHTTPAdapter'))")
    assert out == "True True"


def test_the_prefetch_imports_httpx_without_its_command_line_client() -> None:
    out = _fresh("import sys\nfrom orchestrator.run.prefetch import _import_httpx\n_import_httpx()\n"
                 "import httpx\nprint(sorted(m for m in ('click', 'rich', 'pygments', 'httpx._main')"
                 " if m in sys.modules), callable(httpx.main), httpx.Client.__name__)")
    assert out == "[] True Client"


def test_the_checks_import_no_asyncio_and_no_paramiko() -> None:
    out = _fresh("import sys\nimport orchestrator.cli, orchestrator.run.refusals, orchestrator.sweep.app\n"
                 "print(sorted(m for m in ('asyncio', 'paramiko', 'httpx') if m in sys.modules))")
    assert out == "[]"


def test_the_command_lines_prefetch_keeps_pandas_out_and_pyarrow_still_reaches_it_later() -> None:
    out = _fresh("import sys\nfrom orchestrator.run import prefetch\nprefetch.no_pandas_objects()\nprefetch._load()\n"
                 "print('pandas' in sys.modules)\nimport pyarrow\n"
                 "print(type(pyarrow.table({'a': [1]}).to_pandas()).__name__)")
    assert out.splitlines() == ["False", "DataFrame"]
    assert _fresh("import sys\nfrom orchestrator.run import prefetch\nprefetch._load()\n"
                  "print('pandas' in sys.modules)") == "True"  # a library user's process: pyarrow as it is


def test_pandas_is_absent_only_for_the_thread_that_asked() -> None:
    import threading

    from orchestrator.run.prefetch import _NoPandas

    finder, seen = _NoPandas(), []
    thread = threading.Thread(target=lambda: seen.append(finder.find_spec("pandas", None)))
    thread.start()
    thread.join()
    assert seen == [None] and finder.find_spec("numpy", None) is None
    try:
        finder.find_spec("pandas.core", None)
    except ModuleNotFoundError as exc:
        assert exc.name == "pandas.core"
    else:
        raise AssertionError("pandas was found in the thread that made the finder")


def test_a_runtime_for_an_ssh_host_reaches_it_through_paramiko() -> None:
    """The ssh transport is there when the first runtime is a local one's and a far host's comes after."""
    out = _fresh("from orchestrator.errors import DockerUnavailable\nfrom orchestrator.runtime import docker_sdk\n"
                 "from orchestrator.runtime.docker import DockerRuntime\ndocker_sdk.docker_sdk(False)\n"
                 "try:\n    DockerRuntime('ssh://nobody@127.0.0.1:1')\n"
                 "except DockerUnavailable as exc:\n    print(exc)")
    assert "Unable to connect to port 1 on 127.0.0.1" in out and "paramiko" not in out  # not 'Install paramiko'
