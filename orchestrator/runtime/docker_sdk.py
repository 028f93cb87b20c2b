"""The Docker SDK as runtime/docker.py uses it: imported without paramiko unless a host is reached over ssh, and
what it raises when the host cannot be reached."""

from __future__ import annotations

import sys
from typing import Any


def docker_sdk(ssh: bool) -> Any:
    """The Docker SDK. Its import tries paramiko, for ssh:// hosts (about 0.1 s of imports, before the first
    engine starts): kept out while no host is reached over ssh, and the SDK's ssh transport added once one is."""
    if "docker" not in sys.modules and not ssh and "paramiko" not in sys.modules:
        sys.modules["paramiko"] = None  # type: ignore[assignment]  # the SDK's `import paramiko` fails: no ssh
        try:
            import docker
        finally:
            del sys.modules["paramiko"]
    import docker
    import docker.api.client
    import docker.errors

    if ssh and not hasattr(docker.api.client, "SSHHTTPAdapter"):  # imported without it, above
        from docker.transport.sshconn import SSHHTTPAdapter

        docker.api.client.SSHHTTPAdapter = SSHHTTPAdapter  # where the SDK's APIClient looks it up
    return docker


def link_errors() -> tuple[type[BaseException], ...]:
    """What the SDK raises when the Docker host cannot be reached: dockerd gone, or the ssh link dropped."""
    import requests

    # builtin ConnectionError: broken pipes and resets; not every OSError (a build context's files are not the link)
    errors: tuple[type[BaseException], ...] = (requests.exceptions.ConnectionError, ConnectionError, EOFError)
    paramiko = sys.modules.get("paramiko")  # imported for an ssh:// host only: no other link raises its errors
    if paramiko is not None:
        errors += (paramiko.SSHException,)
    return errors
