"""A send that failed, as data: the one place an exception of the transport becomes an error kind
(record/failures.py), for every sender (httpx's client, the batch release's and the load generator's sockets)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.record.failures import ErrorKind


@dataclass(frozen=True)
class Failed:
    """Why a request got no answer: its kind and its words (the `responses` row's error_kind and error)."""

    kind: ErrorKind
    said: str


def failed(exc: BaseException, stage: ErrorKind, words: str = "") -> Failed:
    """A failed send, its words `words` or else the exception's."""
    return Failed(kind(exc, stage), words or said(exc))


def kind(exc: BaseException, stage: ErrorKind) -> ErrorKind:
    """What failed, where `stage` (CONNECT, WRITE or READ) is what the sender was doing. A refused connection,
    a timeout and a broken protocol say so at any stage; httpx's exceptions name their own stage."""
    import h11
    import httpx  # imported where used (run/wire/client.py: not before anything starts)

    causes = [exc]
    while (cause := causes[-1].__cause__ or causes[-1].__context__) is not None and cause not in causes:
        causes.append(cause)  # httpx wraps httpcore's exception, which wraps the socket's
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return ErrorKind.REFUSED
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return ErrorKind.TIMEOUT
    if isinstance(exc, (httpx.ProtocolError, httpx.DecodingError, h11.ProtocolError)):
        return ErrorKind.PROTOCOL
    if isinstance(exc, httpx.ConnectError):
        return ErrorKind.CONNECT
    if isinstance(exc, httpx.WriteError):
        return ErrorKind.WRITE
    return ErrorKind.READ if isinstance(exc, httpx.ReadError) else stage


def unanswered(exc: BaseException, timeout_s: float) -> Failed:
    """A sent request's answer that did not come whole: a timeout says how long it was waited for."""
    return failed(exc, ErrorKind.READ, f"no answer in {timeout_s:g} s" if isinstance(exc, TimeoutError) else "")


def said(exc: BaseException) -> str:
    """An exception in words: its type and message."""
    return f"{type(exc).__name__}: {exc}".rstrip(": ")
