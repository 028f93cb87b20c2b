"""What failed in a request, as data: the `responses` table's `error_kind`, written next to `error` (its words)
at send time. Readers ask the kind, never the words; a record of schema 6 or older has no kind, and `kind_of`
derives it from the words, as those runs' readers did, here and nowhere else."""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    REFUSED = "refused"  # nothing listened: the connection was refused
    CONNECT = "connect"  # no connection for another reason (unresolved host, closed during the warm-up)
    WRITE = "write"  # the request's bytes could not be sent
    TIMEOUT = "timeout"  # no connection or no whole answer in time
    READ = "read"  # the connection broke while the answer was read
    PROTOCOL = "protocol"  # the answer broke HTTP (the server closed without an answer)
    HTTP = "http"  # the server answered with an error status
    ANSWER = "answer"  # the answer said an error, did not parse, or counted other prompt tokens than were sent
    CUT = "cut"  # cut by the grace period or by Ctrl-C, or never sent (the engine had died, the window ended)


# Errors of the transport, not of the server's answer: what load does to a batch.
TRANSPORT = frozenset({ErrorKind.REFUSED, ErrorKind.CONNECT, ErrorKind.WRITE, ErrorKind.TIMEOUT, ErrorKind.READ,
                       ErrorKind.PROTOCOL})


def kind_of(error: str | None, kind: str | None) -> ErrorKind | None:
    """A row's error kind: the recorded one, or for a row of schema 6 or older (an error, no kind) the one its
    words say, by the substrings those records' readers matched (httpx's exception names)."""
    if kind is not None:
        return ErrorKind(kind)
    if error is None:
        return None
    said = error.lower()
    if "timeout" in said or "timed out" in said:
        return ErrorKind.TIMEOUT
    if "connecterror" in said:
        return ErrorKind.REFUSED if "refused" in said else ErrorKind.CONNECT
    if "remoteprotocolerror" in said:
        return ErrorKind.PROTOCOL
    if "readerror" in said or "connection" in said:  # a dropped or reset connection
        return ErrorKind.READ
    if said.startswith("http "):
        return ErrorKind.HTTP
    return ErrorKind.CUT if said.startswith(("cut", "not sent")) else ErrorKind.ANSWER
