"""Refusals every server shares (the collector, the agent's /metrics, the dashboard): the
answers to a connection refused at the cap or cut at its deadline (``Refusal``), and the
log of refused requests, one line per kind of refusal per minute (``RefusalLog``).

A client with a wrong token retries every batch; logging each 401 would flood the log,
logging none left the operator blind (a run delivered nothing and the collector said
nothing). So the first refusal of a kind (status, client address, path) is logged at once
and the rest of that minute are counted into the next line. The request's query string and
headers are never logged: they can carry the token.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from netserve.ratelog import RateLimitedLog

INTERVAL_SECONDS = 60.0
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Refusal:
    """One refusal of a connection: its status, the reason logged, the message answered,
    and the InfluxDB-style error code of the collector's JSON answers."""

    status: HTTPStatus
    reason: str
    message: str
    code: str
    retry_after: bool = False

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)} if self.retry_after else {}

    def plain(self) -> bytes:
        """The whole answer as text (the agent's /metrics, the dashboard), closing."""
        return _answer(self.status, "text/plain; charset=utf-8", f"{self.message}\n", self)

    def json(self) -> bytes:
        """The whole answer as the collector's JSON error (``code``, ``message``), closing."""
        body = json.dumps({"code": self.code, "message": self.message})
        return _answer(self.status, "application/json; charset=utf-8", body, self)


def _answer(status: HTTPStatus, content_type: str, text: str, refusal: Refusal) -> bytes:
    body = text.encode()
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in refusal.headers().items()),
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def too_many_connections(max_connections: int) -> Refusal:
    """A newcomer at the cap while every connection has a request in hand."""
    return Refusal(
        HTTPStatus.SERVICE_UNAVAILABLE,
        "too many connections",
        f"too many connections (at most {max_connections}): retry in {RETRY_AFTER_SECONDS} s",
        "unavailable",
        retry_after=True,
    )


# A connection that had sent part of a head, closed to make room at the cap.
EVICTED = Refusal(
    HTTPStatus.SERVICE_UNAVAILABLE,
    "too many connections (evicted)",
    "too many connections: this one sent no complete request in time; "
    f"retry in {RETRY_AFTER_SECONDS} s",
    "unavailable",
    retry_after=True,
)
# Part of a head, not all of it, within the header timeout (a thread-per-connection server).
HEAD_TIMEOUT = Refusal(
    HTTPStatus.REQUEST_TIMEOUT,
    "request head not received in time",
    "request head not received in time",
    "timeout",
)
# Part of a request (head or body) past its deadline (the collector).
REQUEST_TIMEOUT = Refusal(
    HTTPStatus.REQUEST_TIMEOUT,
    "request not received in time",
    "request not received in time",
    "timeout",
)
# A body whose bytes would pass the memory budget for the bodies of all connections.
BODY_MEMORY_SPENT = Refusal(
    HTTPStatus.SERVICE_UNAVAILABLE,
    "body memory budget spent",
    "the server holds as many request bodies as its memory budget allows: "
    f"retry in {RETRY_AFTER_SECONDS} s",
    "unavailable",
    retry_after=True,
)


# A plain HTTP request sent to a TLS port is logged with this reason and answered in clear
# with PLAIN_HTTP_ANSWER (as nginx answers "400 The plain HTTP request was sent to HTTPS
# port"), then closed: the client's user reads why, not only the operator.
PLAIN_HTTP_TO_TLS = "plain HTTP sent to the TLS port: the client must use https://, not http://"
PLAIN_HTTP_SENTENCE = "The plain HTTP request was sent to HTTPS port: use https://, not http://"


def _plain_http_answer() -> bytes:
    body = f"{PLAIN_HTTP_SENTENCE}\n".encode("ascii")
    head = (
        "HTTP/1.1 400 Bad Request\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


PLAIN_HTTP_ANSWER = _plain_http_answer()
_HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ")


def looks_like_plain_http(first_bytes: bytes) -> bool:
    """Whether a connection's first bytes are an HTTP request line rather than a TLS
    record (which begins with byte 0x16, a handshake)."""
    return first_bytes.startswith(_HTTP_METHODS)


def refuse_connection(sock: socket.socket, answer: bytes) -> None:
    """Answer a connection refused at once (the socket is left non-blocking, and open):
    what it sent is read first, since closing over unread data resets the connection and
    the client could lose the answer. A TLS connection (its handshake not begun) is
    left for the caller to close: a plain answer inside TLS would be noise."""
    if isinstance(sock, ssl.SSLSocket):
        return
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        for _ in range(16):
            if not sock.recv(65536):
                break
    with contextlib.suppress(OSError):
        sock.send(answer)


def answer_in_clear(sock: socket.socket, answer: bytes) -> None:
    """Answer outside TLS on the socket under a TLS one whose handshake failed on a plain
    request (OpenSSL sent nothing): what is left of the request is read first, as in
    ``refuse_connection``, then ``answer`` written on the descriptor itself."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(sock.fileno())) as raw:
        raw.setblocking(False)
        for _ in range(16):
            if not raw.recv(65536):
                break
    with contextlib.suppress(OSError):
        os.write(sock.fileno(), answer)


class RefusalLog:
    def __init__(
        self,
        log: logging.Logger,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limited = RateLimitedLog(log, interval, clock)

    def refused(self, status: int, client: str, path: str, reason: str) -> bool:
        """Note one refusal; True when it was logged (not only counted)."""
        return self._limited.log(
            logging.WARNING,
            (status, client, path),
            "refused %s from %s: %d %s",
            path,
            client,
            status,
            reason,
        )
