"""The architecture cannot drift silently: the import contracts of pyproject.toml, and the rules
import-linter cannot express (shipped probe files, the arms, module sizes)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchestrator"
PROBES = PACKAGE / "probes"


def _imports(path: Path, guarded: bool = True) -> set[str]:
    """Top-level names imported; `guarded=False` leaves out imports inside a try (optional ones, such as
    the environment probe asking for the engine's version)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if guarded else {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                                  for stmt in t.body for n in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_import_contracts_are_kept() -> None:
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0, "run `lint-imports` to see which"


def test_the_shipped_probe_files_import_only_the_standard_library_and_torch() -> None:
    shipped = {f"orchestrator.probes.{p.stem}" for p in PROBES.glob("*.py")} | {"orchestrator.probes"}
    for path in PROBES.glob("*.py"):
        if path.name == "__init__.py":  # the loader, not shipped
            continue
        allowed = {*sys.stdlib_module_names, "torch", "__future__"}
        tree = ast.parse(path.read_text(encoding="utf-8"))
        siblings = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(
            "orchestrator")]  # travel in the same bundle (probes.bundle), so they may be imported
        assert all(n.module in shipped for n in siblings), f"{path.name} imports the orchestrator beyond probes/"
        foreign = _imports(path, guarded=False) - allowed - ({"orchestrator"} if siblings else set())
        assert not foreign, f"{path.name} imports {foreign}: it runs inside an image with stdlib + torch only"


def test_nothing_under_arms_imports_the_orchestrator() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "arms").rglob("*.py")
                 if "site" not in p.relative_to(ROOT).parts and "orchestrator" in _imports(p)]
    assert offenders == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    limit = 200 if path.name == "cli.py" and path.parent == PACKAGE else 400  # cli: argparse for 7 verbs
    if path.parent == PROBES:  # each ships as one source into an image
        return
    assert lines <= limit, f"{path.relative_to(ROOT)} has {lines} lines (limit {limit}): split it by concern"
