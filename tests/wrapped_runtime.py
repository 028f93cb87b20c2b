"""A runtime added outside runtime/: this module plus its conf entry (tests/wrapped_conf/runtime/wrapped.yaml,
given with --config-dir) and nothing else, as docs/ARCHITECTURE.md's "a new runtime" row says. It passes the
runtime contract (tests/contract/test_runtime_contract.py) and runs the default study
(tests/e2e/test_process_runtime.py). A test's, not the product's: conf/runtime/ lists what users may pick.

It is the process runtime under a name of its own, with traits of its own (a value of their own, equal to the
process runtime's: what it does is the process runtime's), so that what the run asks comes from this class."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from orchestrator.runtime.process import ProcessRuntime
from orchestrator.runtime.traits import IdentityKind, Traits

KIND = "tests.wrapped_runtime:WrappedRuntime"


class WrappedRuntime(ProcessRuntime):
    traits = Traits(isolates_filesystem=False, image_ids=False, ships_images=False, memory_limits=False,
                    own_cgroup=False, identity_kind=IdentityKind.code)

    def __init__(self, *, docker_host: str | None = None, inherit_env: Iterable[str] = (), venv_on_path: bool = True,
                 workdir: Path | None = None, state_dir: Path | None = None) -> None:
        super().__init__(inherit_env, venv_on_path, state_dir=state_dir, workdir=workdir)  # no Docker host
