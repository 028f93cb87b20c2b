"""Imports a study needs only once its first engine is started (httpx for the readiness probe, h11 for the
batches) or answers (pyarrow and the record's Parquet writer, the comparison, the report), made in a thread
from just before that engine's start, while the main thread only waits on it: about 0.8 s a run that would
otherwise come on top of the engine's time. pyarrow imports pandas, when it is installed, at its
first conversion of Python objects (its pandas shim, to recognise pandas objects); that is done here too, not
between two batches. The command line's process hands pyarrow no pandas object (`no_pandas_objects`): there the
shim is told pandas is absent (about 0.2 s of CPU less while the first engine starts); a later use of pandas
through pyarrow (`to_pandas`) imports it then.

The thread must be done before the first request of the protocol is sent (`wait`): an import holds the
interpreter, and a release of a concurrent batch must not wait for one."""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.record.paths import RunPaths
    from orchestrator.record.tables import TableWriter

MODULES = ("httpx", "orchestrator.run.wire.release", "orchestrator.record.tables", "pyarrow.compute",
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

    finder = _NoPandas() if _without_pandas and "pandas" not in sys.modules else None
    if finder is not None:
        sys.meta_path.insert(0, finder)
    try:
        pyarrow.array([0])  # pyarrow's pandas shim: its check, once
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)


_without_pandas = False  # set by the command line (no_pandas_objects)


def no_pandas_objects() -> None:
    """This process hands pyarrow no pandas object (the command line's): its shim need not import pandas."""
    global _without_pandas
    _without_pandas = True


class _NoPandas(importlib.abc.MetaPathFinder):
    """pandas is absent for the thread that makes this finder, and only for it."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> ModuleSpec | None:
        if threading.get_ident() == self._thread and fullname.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None  # any other module, or another thread: the next finder's


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


def table_writer(paths: RunPaths, table: str, part_prefix: str, **options: Any) -> TableWriter:
    """The record's writer, imported when first needed: pyarrow is imported while the first engine loads
    (`Prefetch`), not before anything starts."""
    from orchestrator.record.tables import TableWriter

    return TableWriter(paths, table, part_prefix, **options)
