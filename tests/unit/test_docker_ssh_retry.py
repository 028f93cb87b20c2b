"""Over ssh, a channel sshd refuses (over its MaxSessions) is asked for again: nothing was sent on it. Seen in
CI with four arms side by side over two Docker engines, one of them over ssh (ChannelException(2, 'Connect
failed') at an arm's start); the e2e is tests/e2e/test_parallel_arms.py."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.runtime import docker_sdk


class _Sock:
    def settimeout(self, timeout_s: float) -> None:
        pass

    def exec_command(self, command: str) -> None:
        assert command == "docker system dial-stdio"


class _Transport:
    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.opened = 0

    def open_session(self) -> Any:
        import paramiko

        self.opened += 1
        if self.opened <= self.refusals:
            raise paramiko.ChannelException(2, "Connect failed")
        return _Sock()


def _connection(transport: _Transport) -> Any:
    docker_sdk.docker_sdk(ssh=True)
    from docker.transport.sshconn import SSHConnection

    return SSHConnection(ssh_transport=transport, timeout=5)


def test_a_refused_channel_is_asked_for_again_until_one_opens() -> None:
    transport = _Transport(refusals=3)
    conn = _connection(transport)
    conn.connect()
    assert transport.opened == 4 and isinstance(conn.sock, _Sock)


def test_refusals_past_the_deadline_are_the_link_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import paramiko

    monkeypatch.setattr(docker_sdk, "CHANNEL_RETRY_S", 0.2)
    transport = _Transport(refusals=10_000)
    with pytest.raises(paramiko.ChannelException):
        _connection(transport).connect()
    assert 2 <= transport.opened < 10  # backed off, not spun
