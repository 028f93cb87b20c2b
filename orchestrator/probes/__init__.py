"""Standalone scripts shipped into arm containers (stdlib only; torch only where stated).

`environment.py` is run as `python3 -c SOURCE`: it must not import anything of the orchestrator. The kernel
probes (gemm.py, ops.py and the ops_*.py they use) import the shared harness.py as
`orchestrator.probes.harness`: `bundle` ships them together as one `python3 -c` source.

May import: nothing of the orchestrator.
"""

from __future__ import annotations

from pathlib import Path

PROBES_DIR = Path(__file__).resolve().parent
# what each kernel probe's bundle holds besides itself (the modules it imports from this folder)
BUNDLED = {"gemm": ("harness", "contend"),
           "ops": ("harness", "contend", "ops_attention", "ops_controls", "ops_moe", "ops_norm", "ops_sampling",
                   "ops_ties"),
           "script_runner": ("contend",)}

_BOOTSTRAP = '''import importlib, importlib.abc, importlib.machinery, sys
_SOURCES = {sources!r}
class _Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in _SOURCES:
            return importlib.machinery.ModuleSpec(name, self, is_package=not _SOURCES[name][1])
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        source, filename = _SOURCES[module.__name__]
        exec(compile(source, filename or "<" + module.__name__ + ">", "exec"), module.__dict__)
sys.meta_path.insert(0, _Bundle())
sys.exit(importlib.import_module({main!r}).main())
'''


def source(name: str) -> str:
    """The text of a probe script, to pass as `python3 -c` inside a container."""
    return (PROBES_DIR / f"{name}.py").read_text(encoding="utf-8")


def bundle(name: str) -> str:
    """A `python3 -c` source that runs kernel probe `name` with the modules it imports, from memory: they
    are registered as orchestrator.probes.* (empty parent packages), so no file is written in the image."""
    sources = {"orchestrator": ("", ""), "orchestrator.probes": ("", "")}
    for module in (*BUNDLED[name], name):
        sources[f"orchestrator.probes.{module}"] = (source(module), f"orchestrator/probes/{module}.py")
    return _BOOTSTRAP.format(sources=sources, main=f"orchestrator.probes.{name}")
