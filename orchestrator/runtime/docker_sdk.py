"""The Docker SDK as runtime/docker.py uses it: imported without paramiko unless a host is reached over ssh, and
what it raises when the host cannot be reached."""

from __future__ import annotations

import sys
import time
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
    if ssh:
        _retry_refused_channels()
    return docker


CHANNEL_RETRY_S = 30.0  # how long a channel sshd refuses is asked for again


def _retry_refused_channels() -> None:
    """Every call of the SDK over ssh opens a channel on one ssh connection, and sshd caps the channels open at
    once (MaxSessions, 10 by default): arms side by side on one host hold some (their log streams) while others
    start, and a channel over the cap is refused ("ChannelException(2, 'Connect failed')"). Nothing was sent on
    a refused channel, so it is asked for again, with backoff, until one closes."""
    from docker.transport import sshconn

    if getattr(sshconn.SSHConnection.connect, "retries_refused", False):
        return
    import paramiko

    connect = sshconn.SSHConnection.connect

    def retrying(self: Any) -> None:
        delay_s, deadline = 0.05, time.monotonic() + CHANNEL_RETRY_S
        while True:
            try:
                connect(self)
                return
            except paramiko.ChannelException:
                if time.monotonic() + delay_s > deadline:
                    raise
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 1.0)

    retrying.retries_refused = True  # type: ignore[attr-defined]
    sshconn.SSHConnection.connect = retrying


def link_errors() -> tuple[type[BaseException], ...]:
    """What the SDK raises when the Docker host cannot be reached: dockerd gone, or the ssh link dropped."""
    import requests

    # builtin ConnectionError: broken pipes and resets; not every OSError (a build context's files are not the link)
    errors: tuple[type[BaseException], ...] = (requests.exceptions.ConnectionError, ConnectionError, EOFError)
    paramiko = sys.modules.get("paramiko")  # imported for an ssh:// host only: no other link raises its errors
    if paramiko is not None:
        errors += (paramiko.SSHException,)
    return errors
