"""The architecture cannot drift silently: the import contracts of pyproject.toml, and the rules
import-linter cannot express (shipped probe files, the arms, module sizes)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("init", sorted(PACKAGE.glob("*/__init__.py")), ids=lambda p: p.parent.name)
def test_a_package_docstring_names_only_modules_that_exist(init: Path) -> None:
    """`name.py` is a module of the package; `folder/name.py` one of the orchestrator's or the project's."""
    said = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    named = re.findall(r"(?<![\w*])((?:[\w]+/)*[a-z_]+\.py)\b", said)
    missing = [n for n in named if not (init.parent / n).exists() and not (PACKAGE / n).exists()
               and not (ROOT / n).exists()]
    assert missing == []

ENGINE_PACKAGES = sorted(p.parent for p in (ROOT / "arms").glob("*/*/__init__.py") if "site" not in p.parts)


@pytest.mark.parametrize("package", ENGINE_PACKAGES, ids=lambda p: p.name)
def test_the_modules_of_an_engine_package_import_no_circle(package: Path) -> None:
    """As import-linter's acyclic_siblings contract for the orchestrator: an import inside a function counts."""
    uses: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        names = {alias.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module}
        uses[path.stem] = {n.split(".")[1] for n in names if n.startswith(f"{package.name}.")} - {path.stem}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(m == goal or (m not in seen and reaches(m, goal, seen | {m})) for m in uses.get(start, ()))

    assert [m for m in sorted(uses) if reaches(m, m, {m})] == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    limit = 200 if path.name == "cli.py" and path.parent == PACKAGE else 400  # cli: argparse for 7 verbs
    if path.parent == PROBES:  # each ships as one source into an image
        return
    assert lines <= limit, f"{path.relative_to(ROOT)} has {lines} lines (limit {limit}): split it by concern"


def _contracts() -> list[dict[str, Any]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        contracts: list[dict[str, Any]] = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    return contracts


def _may_import(docstring: str) -> set[str]:
    """The packages a package's docstring says it may import ('May import: a, b.'; 'nothing of the
    orchestrator' is none)."""
    match = re.search(r"May import: ([^.]*)\.", " ".join(docstring.split()))
    assert match, "its docstring has no 'May import: ...' line"
    return set() if match[1].startswith("nothing") else set(match[1].split(", "))


def _imported(graph: Any, package: str) -> set[str]:
    """The other orchestrator packages the package imports directly."""
    found = {imported.split(".")[1] for module in graph.find_descendants(f"orchestrator.{package}")
             | {f"orchestrator.{package}"} for imported in graph.find_modules_directly_imported_by(module)
             if imported.startswith("orchestrator.")}
    return found - {package}


def test_each_package_s_may_import_list_is_its_contract_and_its_imports() -> None:
    """The docstring's list, the contract that forbids the rest of the layers below, and the imports agree:
    a new arrow is added to all three (or not at all), and an arrow no longer used is struck from both."""
    import grimp

    contracts = _contracts()
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    order = [[name.strip().split(".")[1] for name in layer.split("|")] for layer in layers]
    forbidden = {c["source_modules"][0].split(".")[1]: {m.split(".")[1] for m in c["forbidden_modules"]}
                 for c in contracts if "may import:" in c["name"]}
    graph = grimp.build_graph("orchestrator", cache_dir=None)
    packages = [p.parent.name for p in PACKAGE.glob("*/__init__.py")]
    for package in packages:
        docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8")))
        may = _may_import(docstring or "")
        below = {name for layer in order[next(i for i, lay in enumerate(order) if package in lay) + 1:]
                 for name in layer}
        assert below - forbidden.get(package, set()) == may, (
            f"{package}: its docstring may import {sorted(may)}, its contract in pyproject.toml leaves "
            f"{sorted(below - forbidden.get(package, set()))}: make them say the same")
        assert _imported(graph, package) == may, (
            f"{package} imports {sorted(_imported(graph, package))}; its docstring and contract say {sorted(may)}")
        assert _architecture_rows().get(package) == may, f"docs/ARCHITECTURE.md's arrows table and {package}'s differ"


def _architecture_rows() -> dict[str, set[str]]:
    """docs/ARCHITECTURE.md's arrows table: layer -> what it may import."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([a-z, ]+) \| ([a-z, ]+|nothing of the orchestrator|any layer below.*?) \|$", text, re.M)
    return {layer: set() if may.startswith("nothing") else set(may.split(", "))
            for layers, may in rows for layer in layers.split(", ") if not may.startswith("any")}
