"""HTTP client for OpenAI-compatible servers (httpx). Requests never raise for what the server does:
every outcome, a 500, garbage, a timeout, becomes an Exchange that the record keeps.

httpx and tenacity are imported where used: `run` imports this module before anything starts (its checks),
and imports httpx while the first engine starts (run/prefetch.py)."""

from __future__ import annotations

import functools
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from orchestrator.errors import ArmStartError
from orchestrator.record.failures import ErrorKind

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class Exchange:
    status: int | None  # None when no HTTP answer came
    body: bytes
    error: str | None
    send_ns: int  # a batch's request: when its bytes were handed to the kernel
    recv_ns: int
    sent: bool = True  # False: the request never left (no connection, or the engine had died)
    error_kind: ErrorKind | None = None  # what failed, as data (record/failures.py); None on success


def answered(status: int, body: bytes, send_ns: int, recv_ns: int) -> Exchange:
    """An HTTP answer: an error status is the exchange's error."""
    failed = not 200 <= status < 300
    return Exchange(status, body, f"HTTP {status}" if failed else None, send_ns, recv_ns,
                    error_kind=ErrorKind.HTTP if failed else None)


def json_bytes(body: dict[str, Any]) -> bytes:
    """A JSON body as httpx encodes `json=` (compact, UTF-8)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One verifying context for every client of the process: httpx makes (and loads the CA store into) one per
    client otherwise, about 30 ms each, and a study makes three clients per arm."""
    return ssl.create_default_context()


class CompletionClient:
    """`max_connections`: None, no limit, so a pool never silently caps a batch (httpx's default is 100)."""

    def __init__(self, base_url: str, timeout_s: float, max_connections: int | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        import httpx

        self.base_url, self.timeout_s = base_url, timeout_s
        # Batches go out on their own connections (run/wire/release.py), unless a transport stands in for the network.
        self.direct = transport is None and urlsplit(base_url).scheme == "http"
        self._client = httpx.AsyncClient(
            base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport, verify=tls_context())

    async def request(self, method: str, path: str, json: dict[str, Any] | None = None) -> Exchange:
        import httpx

        send_ns = time.time_ns()
        try:
            response = await self._client.request(method, path, json=json)
        except httpx.HTTPError as exc:
            from orchestrator.run.wire import transport

            return Exchange(None, b"", transport.said(exc), send_ns, time.time_ns(),
                            error_kind=transport.kind(exc, ErrorKind.READ))
        return answered(response.status_code, response.content, send_ns, time.time_ns())

    async def complete(self, body: dict[str, Any], path: str = "/v1/completions") -> Exchange:
        return await self.request("POST", path, json=body)

    async def aclose(self) -> None:
        await self._client.aclose()


class _NotReady(Exception):
    pass


def wait_ready(base_url: str, health_path: str, timeout_s: float, exit_code: Callable[[], int | None],
               log_tail: Callable[[], list[str]], transport: httpx.BaseTransport | None = None,
               sleep: Callable[[float], None] = time.sleep, poll_s: float = 0.25, exit_check_s: float = 0.25
               ) -> None:
    """Poll until the health path answers HTTP 200. A connect-only probe lies (docker-proxy accepts
    TCP before the server listens), so only a real 200 counts. Fails fast if the server exits: its exit
    status is asked at the first probe and then every `exit_check_s` (an engine API call, dearer than a probe)."""
    import httpx
    from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay

    exit_checked = -float("inf")

    def probe(client: httpx.Client) -> None:
        nonlocal exit_checked
        if time.monotonic() - exit_checked >= exit_check_s:
            exit_checked = time.monotonic()
            code = exit_code()
            if code is not None:
                raise ArmStartError(f"server exited with status {code} before it was ready", log_tail())
        try:
            response = client.get(health_path)
        except httpx.HTTPError as exc:
            raise _NotReady(f"{type(exc).__name__}") from exc
        if response.status_code != 200:
            raise _NotReady(f"HTTP {response.status_code}")

    def wait(state: RetryCallState) -> float:
        return min(poll_s, FIRST_POLL_S + POLL_GROWTH * (state.seconds_since_start or 0.0))

    with httpx.Client(base_url=base_url, timeout=5.0, transport=transport, verify=tls_context()) as client:
        retrying = Retrying(retry=retry_if_exception_type(_NotReady), stop=stop_after_delay(timeout_s),
                            wait=wait, sleep=sleep, reraise=True)
        try:
            retrying(probe, client)
        except _NotReady as exc:
            raise ArmStartError(f"server not ready after {timeout_s:g} s (last probe of {health_path}: {exc}); "
                                "raise the arm's startup_timeout_s if it is just slow", log_tail()) from exc


# Readiness is probed every 20 ms at first, the pause growing 10 ms per second waited, to poll_s: an engine is
# seen ready about 10 ms + 0.5 % of its start after it is (0.03 s for one that loads in 4 s; a pause growing 3 %
# a probe made that 0.07 s), at about 110 probes in the first 4 s, 1-1.5 ms of CPU each on a loaded 2-core machine.
FIRST_POLL_S = 0.02
POLL_GROWTH = 0.01
