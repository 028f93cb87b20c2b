"""Runtimes behind one seam (base.Runtime); `make_runtime` picks one from the runtime config."""

from __future__ import annotations

from orchestrator.runtime.base import Runtime
from orchestrator.schema import RuntimeConfig, RuntimeKind


def make_runtime(config: RuntimeConfig) -> Runtime:
    if config.kind is RuntimeKind.docker:
        from orchestrator.runtime.docker import DockerRuntime

        return DockerRuntime(config.docker_host)
    if config.kind is RuntimeKind.process:
        from orchestrator.runtime.process import ProcessRuntime

        return ProcessRuntime(config.inherit_env, config.venv_on_path)
    raise NotImplementedError(config.kind)  # the enum admits nothing else
