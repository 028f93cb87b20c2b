"""The SSH side of a Docker host reached as `ssh://[user@]host:port`: the Docker SDK talks to the far
daemon through paramiko (which reads ~/.ssh/config, ~/.ssh/known_hosts and keys by $HOME); this module
adds what the SDK does not do, with the ssh client (OpenSSH), reading the same ~/.ssh/config:

- images shipped with `docker load` run there, fed through ssh;
- tunnels: an arm's port stays on the far host's 127.0.0.1; the orchestrator reaches it through
  `ssh -L 127.0.0.1:LOCAL:127.0.0.1:REMOTE`;
- a watchdog per run: a session on the far host that waits for its stdin to close, then removes every
  container of the run there. Stdin closes when the orchestrator ends in any way (even kill -9) or the
  link drops (sshd closes the session), so no container of the run is left running on the far host.

Every ssh process runs `cat >/dev/null` on the far side with our pipe as its stdin: it ends when we do.
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.errors import ArmStartError, ImageError
from orchestrator.runtime.host import free_port

HOLD = "cat >/dev/null"  # the far side's command: lives as long as our end of its stdin


class SshLink:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname:
            raise ValueError(f"not an ssh:// Docker host: {url!r}")
        self.url = url
        self.base = ["ssh", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
                     "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        config = Path.home() / ".ssh" / "config"  # by $HOME, as docker-py's paramiko reads it
        if config.is_file():
            self.base += ["-F", str(config)]
        if parts.port:
            self.base += ["-p", str(parts.port)]
        if parts.username:
            self.base += ["-l", parts.username]
        self.base += ["--", parts.hostname]
        self.tunnels: dict[str, subprocess.Popen[bytes]] = {}
        self.watchdogs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, options: list[str], remote: str) -> subprocess.Popen[bytes]:
        argv = [*self.base[:-2], *options, *self.base[-2:], remote]
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def tunnel(self, key: str, remote_port: int, timeout_s: float = 30.0) -> int:
        """Forward a free local port to the far host's 127.0.0.1:remote_port; returns the local port."""
        local_port = free_port()
        proc = self._spawn(["-L", f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}"], HOLD)
        self.tunnels[key] = proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode("utf-8", "replace").strip() if proc.stderr else ""
                self.close_tunnel(key)
                raise ArmStartError(f"the ssh tunnel to {self.url} (port {remote_port}) ended: {err}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", local_port), timeout=1):
                return local_port
            time.sleep(0.1)
        self.close_tunnel(key)
        raise ArmStartError(f"the ssh tunnel to {self.url} (port {remote_port}) did not open in {timeout_s:.0f} s")

    def watch(self, label: str) -> None:
        """Start (once per label) the far-side session that removes the label's containers when we go."""
        if label in self.watchdogs and self.watchdogs[label].poll() is None:
            return
        remove = (f"docker ps -aq --filter label={shlex.quote(label)} | xargs -r docker rm -f >/dev/null")
        self.watchdogs[label] = self._spawn([], f"{HOLD}; {remove}")

    def load(self, chunks: Iterable[bytes]) -> None:
        """`docker save ... | ssh HOST docker load`: OpenSSH carries an image faster than paramiko does."""
        proc = subprocess.Popen([*self.base, "docker load -q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for chunk in chunks:
                proc.stdin.write(chunk)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the far side gave up: its output says why
        finally:
            output = proc.stdout.read().decode("utf-8", "replace").strip()
            status = proc.wait()
        if status != 0:
            raise ImageError(f"docker load on {self.url} failed (exit {status}): {output[-500:]}")

    def close_tunnel(self, key: str) -> None:
        if proc := self.tunnels.pop(key, None):
            _end(proc)

    def unwatch(self, label: str) -> None:
        """Close the watchdog's stdin: the far side removes what is left of the label, then the session ends."""
        if proc := self.watchdogs.pop(label, None):
            with contextlib.suppress(OSError):
                if proc.stdin:
                    proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _end(proc)


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stderr):
        with contextlib.suppress(OSError):
            if stream:
                stream.close()
