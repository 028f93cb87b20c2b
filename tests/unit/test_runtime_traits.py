"""Nothing outside runtime/ decides on a runtime's kind: run/, guard/, config/ and the rest ask its traits
(runtime/traits.py), and a recorded identity is read in one place (record/identity.py). The scan below is
this rule; tests/contract/test_runtime_contract.py holds each runtime's traits against what it does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator.record.identity import CODE, IMAGE, identity_kind
from orchestrator.runtime import KINDS, make_runtime
from orchestrator.runtime.traits import BUILT_IN, IdentityKind, kind_running, traits_of

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "orchestrator"
RUNTIME_CLASSES = {"DockerRuntime", "ProcessRuntime", "FakeRuntime", "SshLink"}
IDENTITY_READER = "orchestrator/record/identity.py"


def _names_a_kind(node: ast.AST) -> bool:
    """A kind's name ("docker", RuntimeKind.process), a `X.runtime.kind` read, or a tuple/set/list of those."""
    if isinstance(node, ast.Constant):
        return node.value in KINDS
    if isinstance(node, ast.Attribute):
        return ((isinstance(node.value, ast.Name) and node.value.id == "RuntimeKind")
                or (node.attr in ("kind", "value") and _names_a_kind(node.value))
                or (node.attr == "kind" and isinstance(node.value, ast.Attribute) and node.value.attr == "runtime"))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
        return any(_names_a_kind(arg) for arg in node.args)
    if isinstance(node, ast.Tuple | ast.Set | ast.List):
        return any(_names_a_kind(elt) for elt in node.elts)
    return False


def kind_decisions(source: str) -> list[str]:
    """Each place in `source` that branches on a runtime's kind, as 'line N: code'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        compared = isinstance(node, ast.Compare) and any(_names_a_kind(n) for n in [node.left, *node.comparators])
        is_instance = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                       and any(isinstance(n, ast.Name) and n.id in RUNTIME_CLASSES for n in ast.walk(node.args[1])))
        prefix = isinstance(node, ast.Constant) and node.value in ("process:", "process:sha256:")
        protocol_escape = isinstance(node, ast.Attribute) and node.attr == "engine_name"
        if compared or is_instance or prefix or protocol_escape:
            found.append(f"line {getattr(node, 'lineno', '?')}: {ast.unparse(node)}")
    return found


def test_no_module_outside_runtime_decides_on_the_runtime_s_kind() -> None:
    found = {}
    for path in sorted(ORCHESTRATOR.rglob("*.py")):
        name = path.relative_to(ORCHESTRATOR.parent).as_posix()
        if name.startswith("orchestrator/runtime/") or name == IDENTITY_READER:
            continue
        if decisions := kind_decisions(path.read_text(encoding="utf-8")):
            found[name] = decisions
    assert found == {}


@pytest.mark.parametrize("branch", [
    "if config.runtime.kind is RuntimeKind.docker: pass",
    "process = config.runtime.kind.value == 'process'",
    "x = getattr(kind, 'value', kind) == 'docker'",
    "ok = kind in ('docker', 'ssh')",
    "here = runtime.engine_name() if isinstance(runtime, DockerRuntime) else None",
    "code = image_id.startswith('process:')",
])
def test_the_scan_sees_each_form_a_kind_decision_took(branch: str) -> None:
    assert kind_decisions(branch)


def test_the_scan_lets_a_trait_question_through() -> None:
    assert kind_decisions("if traits_of(config.runtime.kind).isolates_filesystem: pass") == []


def test_every_kind_a_config_names_has_traits_and_its_runtime_carries_them() -> None:
    assert set(KINDS) == set(BUILT_IN)
    from orchestrator.runtime.docker import DockerRuntime  # made without a Docker host: its class says

    assert DockerRuntime.traits is traits_of("docker") and make_runtime("process").traits is traits_of("process")
    with pytest.raises(ValueError, match=r"'k8s' is neither a built-in runtime \(docker, process\) nor module:Class"):
        traits_of("k8s")
    with pytest.raises(ValueError, match="its class has no `traits`"):
        traits_of("orchestrator.runtime.spec:Runtime")
    with pytest.raises(ValueError, match="ModuleNotFoundError"):
        traits_of("no_such_module:Runtime")


def test_a_recorded_identity_is_read_in_one_place_and_names_the_runtime_that_runs_it_again() -> None:
    assert identity_kind("process:sha256:ab") == CODE == IdentityKind.code.value
    assert identity_kind("sha256:ab") == IMAGE == IdentityKind.image.value
    assert kind_running(IdentityKind(identity_kind("process:sha256:ab"))) == "process"
    assert kind_running(IdentityKind(identity_kind("sha256:ab"))) == "docker"


@pytest.mark.parametrize(("kind", "why"), [
    ("k8s", "'k8s' is neither a built-in runtime (docker, process) nor module:Class"),
    ("no_such_module:Runtime", "'no_such_module:Runtime': ModuleNotFoundError: No module named 'no_such_module'"),
])
def test_a_kind_that_names_no_runtime_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], kind: str,
                                                              why: str) -> None:
    from orchestrator import cli

    assert cli.main(["plan", f"runtime.kind={kind}"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"error: runtime.kind='{kind}' names nothing that exists. Available: docker, process; use one of them, or "
        f"module:Class of a runtime outside runtime/ (docs/runtimes.md): {why}"]


def test_a_module_class_kind_gets_its_class_s_traits_and_is_made_with_the_runtime_options() -> None:
    from tests.wrapped_runtime import KIND, WrappedRuntime

    assert traits_of(KIND) is WrappedRuntime.traits
    made = make_runtime(KIND, inherit_env=["PATH"], venv_on_path=False)
    assert type(made) is WrappedRuntime and made.inherit_env == ("PATH",) and not made.venv_on_path
