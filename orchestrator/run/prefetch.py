"""Imports a study needs only once its first engine is started (httpx for the readiness probe, h11 for the
batches) or answers (pyarrow and the record's Parquet writer, the comparison, the report), made in a thread
from just before that engine's start, while the main thread only waits on it: about 0.8 s a run that would
otherwise come on top of the engine's time. pyarrow imports pandas, when it is installed, at its
first conversion of Python objects (its pandas shim); that is done here too, not between two batches.

The thread must be done before the first request of the protocol is sent (`wait`): an import holds the
interpreter, and a release of a concurrent batch must not wait for one."""

from __future__ import annotations

import importlib
import sys
import threading

MODULES = ("httpx", "orchestrator.run.release", "orchestrator.record.tables", "pyarrow.compute",
           "orchestrator.analysis.compare", "orchestrator.report.build", "orchestrator.report.verdict",
           "orchestrator.report.guard", "orchestrator.report.markdown")


class Prefetch:
    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=_load, name="prefetch-imports", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()


def _load() -> None:
    try:
        _import_httpx()
        for name in MODULES:
            importlib.import_module(name)
    except ImportError:
        return  # the main thread's own import of it says what is wrong, where it is needed
    import pyarrow

    pyarrow.array([0])  # pyarrow's pandas shim: its import, once


def _import_httpx() -> None:
    """httpx without its command-line client, which its import also imports (click, rich, pygments: about 0.1 s
    of CPU while the first engine starts, in a run that never calls it): its `httpx.main` is then a stub that
    says so."""
    if "httpx" in sys.modules:
        return
    sys.modules["httpx._main"] = None  # type: ignore[assignment]  # httpx's `from ._main import main` fails
    try:
        import httpx  # noqa: F401
    finally:
        if sys.modules.get("httpx._main", 0) is None:
            del sys.modules["httpx._main"]
