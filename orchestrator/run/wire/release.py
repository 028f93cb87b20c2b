"""Releasing a batch together: requests a study sends "at once" must reach the server at once.

httpx's pool cannot promise that: httpcore 1.0 hands one idle keep-alive connection to every queued
request and lets the rest wait their turn (encode/httpcore#822), so a batch sent through it reached the
server over seconds. Here a batch gets its own connections, one per request, opened and warmed before it
(a GET of the health path answered on each: the server has accepted the connection and is reading it);
every request's bytes are made in advance (h11); then one synchronous loop hands them to the kernel back
to back with `socket.send`, as a bare loop of `sendall` would. Raw non-blocking sockets driven by the event
loop's sock_* calls, not streams: a loop of StreamWriter writes costs 20-30 % more than one of sends, and
at 256 requests the raw loop's worst spread at the server was the lower in each of three same-run
comparisons (bench/release_spread.py measures it where it matters, at the server's kernel receive
timestamps; docs/benchmarks.md has the figures). Each answer is read with h11 and recorded as the httpx
client records one: an Exchange, never an exception.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11

from orchestrator.record.failures import ErrorKind
from orchestrator.run.wire.client import Exchange, answered
from orchestrator.run.wire.transport import Failed, failed, unanswered

OPEN_TRIES = 3  # opening a connection again is not a retry of a request: nothing of the batch was sent yet
READ_BYTES = 65536
Address = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]  # as getaddrinfo gives it


@dataclass
class Connection:
    sock: socket.socket  # non-blocking, connected, answered once
    h11: h11.Connection
    payload: bytes = b""  # the request, made as soon as the connection is warm
    unsent: bytes = b""  # what the kernel did not take at the release (a body past its send buffer)


class NoAnswer(Exception):
    """The connection ended or broke the protocol before a whole answer came."""


async def release(base_url: str, warm_path: str, requests: list[tuple[str, bytes]], timeout_s: float,
                  connect_timeout_s: float = 10.0) -> list[asyncio.Task[Exchange]]:
    """Open and warm one connection per (path, JSON body bytes), then send them all in one loop. Returns
    when every request's bytes are with the kernel: one task per request, in order, yields its Exchange.
    A connection that could not be opened gives its request an Exchange with `sent=False`."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    authority = url.netloc
    addresses = await resolve(host, port, connect_timeout_s)  # once for the batch, not once per connection
    opened: list[Connection | Failed] = [addresses] * len(requests) if isinstance(addresses, Failed) else list(
        await asyncio.gather(*(_open(addresses, authority, warm_path, connect_timeout_s, path, body)
                               for path, body in requests)))
    sent_ns = _send(opened)
    return [asyncio.create_task(_answer(conn, send_ns, timeout_s) if isinstance(conn, Connection)
                                else _unsent(conn, send_ns))
            for conn, send_ns in zip(opened, sent_ns, strict=True)]


def _send(opened: list[Connection | Failed]) -> list[int]:
    """Each request's time with the kernel; a connection that broke since its warm-up becomes its error."""
    sent_ns: list[int] = []
    for i, conn in enumerate(opened):  # the release: one send per request, nothing else in this loop
        if isinstance(conn, Connection):
            try:
                conn.unsent = conn.payload[conn.sock.send(conn.payload):]
            except BlockingIOError:
                conn.unsent = conn.payload
            except OSError as exc:
                conn.sock.close()
                opened[i] = failed(exc, ErrorKind.WRITE, f"{type(exc).__name__}: {exc} (not sent)")
        sent_ns.append(time.time_ns())
    return sent_ns


async def resolve(host: str, port: int, timeout_s: float) -> Sequence[Address] | Failed:
    """The host's addresses, or why there are none."""
    try:
        async with asyncio.timeout(timeout_s):
            return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:  # TimeoutError is one
        return failed(exc, ErrorKind.CONNECT, f"cannot resolve {host}: {type(exc).__name__}: {exc} (not sent)")


async def _open(addresses: Sequence[Address], authority: str, warm_path: str, timeout_s: float, path: str,
                body: bytes) -> Connection | Failed:
    """A warm connection with its request made, or why there is none."""
    conn = await warm_connection(addresses, authority, warm_path, timeout_s)
    if isinstance(conn, Connection):
        conn.payload = _request_bytes(conn, authority, path, body)
    return conn


async def warm_connection(addresses: Sequence[Address], authority: str, warm_path: str,
                          timeout_s: float) -> Connection | Failed:
    """A connection the server has accepted and answered once (ready for its next request), or why there is
    none (run/load/generator.py opens its pool with it too)."""
    loop = asyncio.get_running_loop()
    error = Failed(ErrorKind.CONNECT, "no address")
    for family, kind, proto, _, address in list(addresses) * OPEN_TRIES:  # every address, OPEN_TRIES rounds
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports do
        try:
            async with asyncio.timeout(timeout_s):
                await loop.sock_connect(sock, address)
                conn = Connection(sock, h11.Connection(h11.CLIENT))
                await loop.sock_sendall(sock, b"".join(_bytes(conn.h11.send(event)) for event in (
                    h11.Request(method="GET", target=warm_path, headers=[("Host", authority)]),
                    h11.EndOfMessage())))
                status, _ = await _read_answer(conn)
            if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
                conn.h11.start_next_cycle()
                return conn
            error = Failed(ErrorKind.CONNECT,
                           f"the server closed the connection after answering {warm_path} (HTTP {status})")
        except TimeoutError as exc:
            error = failed(exc, ErrorKind.CONNECT, f"no connection and answer to {warm_path} in {timeout_s:g} s")
        except (OSError, NoAnswer, h11.ProtocolError) as exc:
            error = failed(exc, ErrorKind.CONNECT)
        sock.close()
    return Failed(error.kind, f"{error.said} (not sent)")


def _request_bytes(conn: Connection, authority: str, path: str, body: bytes) -> bytes:
    headers = [("Host", authority), ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
               ("Connection", "close")]
    return b"".join(_bytes(conn.h11.send(event)) for event in (
        h11.Request(method="POST", target=path, headers=headers), h11.Data(data=body), h11.EndOfMessage()))


def _bytes(data: bytes | None) -> bytes:
    return data or b""


async def _read_answer(conn: Connection) -> tuple[int, bytes]:
    status, chunks = 0, []
    while True:
        event = conn.h11.next_event()
        if event is h11.NEED_DATA:
            data = await asyncio.get_running_loop().sock_recv(conn.sock, READ_BYTES)
            if not data and conn.h11.their_state is h11.SEND_RESPONSE:
                raise h11.RemoteProtocolError("Server disconnected without sending a response.")  # as httpx says
            conn.h11.receive_data(data)  # b"": the server closed (the end of a body read to the close)
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return status, b"".join(chunks)
        elif isinstance(event, h11.ConnectionClosed):
            raise NoAnswer("the server closed the connection before a whole answer")


async def _answer(conn: Connection, send_ns: int, timeout_s: float) -> Exchange:
    try:
        async with asyncio.timeout(timeout_s):
            if conn.unsent:
                await asyncio.get_running_loop().sock_sendall(conn.sock, conn.unsent)
            status, body = await _read_answer(conn)
    except (TimeoutError, OSError, NoAnswer, h11.ProtocolError) as exc:
        why = unanswered(exc, timeout_s)
        return Exchange(None, b"", why.said, send_ns, time.time_ns(), error_kind=why.kind)
    finally:
        conn.sock.close()
    return answered(status, body, send_ns, time.time_ns())


async def _unsent(reason: Failed, now_ns: int) -> Exchange:
    return Exchange(None, b"", reason.said, now_ns, now_ns, sent=False, error_kind=reason.kind)

