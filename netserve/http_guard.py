"""Limits for the servers that keep a thread per connection: the agent's /metrics and the
dashboard (werkzeug). The collector reads its connections on an event loop instead
(``collector/ingest/connections.py``); these two keep their threads (a scrape or a page load is a
few requests, and werkzeug is a threaded server) and bound what a slow client can hold,
with the collector's rules, names and numbers (``netserve.limits.ConnectionLimits``, the cap's
order ``netserve.limits.ConnectionCap``, the refusals' answers ``netserve.refusals``):

- ``max_connections``: connections (threads) open at once. At the cap a new connection
  makes room by closing the one that has waited longest without a request (idle: closed,
  as its idle timeout would; part of a head sent: ``503`` with ``Retry-After``); only when
  every connection has a request in hand is the new one refused: ``503`` with
  ``Retry-After: 5`` and a one-line reason, then closed.
- ``header_timeout``: a request's whole head must arrive within it, counted from the
  accept for a connection's first request and from the first byte for later ones. It is a
  deadline for the head, not a timeout per read: a head trickled a byte at a time is cut
  when it passes. Nothing sent: closed; part of a head: ``408`` and closed.
- ``idle_timeout``: a kept-alive connection with no new request is closed.
- ``write_timeout``: once a request is in hand its socket gets this timeout, so a client
  that stops reading the answer (or sending its body) frees the thread.

How: a thread blocked reading its socket cannot watch a clock, so one watchdog thread per
server keeps every connection's deadline and, when one passes, shuts the socket down: the
blocked read returns at once and the connection's thread ends. The request handler tells
the guard where its connection stands (``wait_for_request`` before each request,
``request_in_hand`` once the head is read); ``GuardedThreadingMixIn`` admits and releases
connections for a ``socketserver`` threading server.

Refusals (``408``, ``503``) are logged once a minute per kind and client
(``netserve.refusals.RefusalLog``); a silent or idle connection closed is not logged.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO

from netserve.limits import ConnectionCap, ConnectionLimits
from netserve.refusals import (
    EVICTED,
    HEAD_TIMEOUT,
    PLAIN_HTTP_ANSWER,
    PLAIN_HTTP_TO_TLS,
    RefusalLog,
    answer_in_clear,
    refuse_connection,
    too_many_connections,
)

__all__ = ["ConnectionGuard", "ConnectionLimits", "GuardedThreadingMixIn"]


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    client: str
    deadline: float | None  # monotonic; None: a request in hand
    requests: int = 0  # requests read so far
    partial: bool = False  # bytes of a request head have arrived


class ConnectionGuard:
    """The cap and deadlines of one server's connections (see the module's docstring)."""

    def __init__(self, limits: ConnectionLimits, log: logging.Logger, name: str) -> None:
        problem = limits.problem()
        if problem:
            raise ValueError(problem)
        self.limits = limits
        self.log = log
        self.refusals = RefusalLog(log)
        self.cap: ConnectionCap[socket.socket] = ConnectionCap(limits.max_connections)
        self.timed_out = 0  # connections closed at their deadline
        self._connections: dict[socket.socket, _Connection] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wake_at = math.inf
        self._stopped = False
        self._watchdog = threading.Thread(target=self._watch, name=f"{name}-deadlines", daemon=True)
        self._watchdog.start()

    @property
    def open(self) -> int:
        return len(self._connections)

    @property
    def refused(self) -> int:
        """New connections refused at the cap."""
        return self.cap.refused

    @property
    def evicted(self) -> int:
        """Waiting connections closed to make room."""
        return self.cap.evicted

    # ---------------------------------------------------------------- the server's side

    def admit(self, sock: socket.socket, client_address: tuple) -> bool:
        """Take a just-accepted connection, making room at the cap; False: it was refused
        (answered 503 here: the caller closes it)."""
        client = str(client_address[0]) if client_address else "-"
        notes: list[tuple[int, str, str]] = []
        refusal = too_many_connections(self.limits.max_connections)
        with self._lock:
            if self.cap.full(len(self._connections)):
                victim = self.cap.make_room()
                if victim is not None:
                    notes.append(self._cut(self._connections[victim], evicted=True))
                else:
                    notes.append((refusal.status, client, refusal.reason))
            admitted = not self.cap.full(len(self._connections))
            if admitted:
                connection = _Connection(sock, client, None)
                self._connections[sock] = connection
                self.cap.waits(sock)
                self._set_deadline(connection, time.monotonic() + self.limits.header_timeout)
        self._note(notes)
        if not admitted:
            refuse_connection(sock, refusal.plain())
        return admitted

    def release(self, sock: socket.socket) -> None:
        """The connection's thread is done (before its socket is closed)."""
        with self._lock:
            self._connections.pop(sock, None)
            self.cap.busy(sock)

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            self._changed.notify()

    # ---------------------------------------------------------------- the handler's side

    def wait_for_request(self, sock: socket.socket, rfile: BinaryIO) -> bool:
        """Wait for the first byte of the connection's next request (under the header
        deadline for the first request, the idle one for later ones) without consuming
        it; False: the client closed, or the guard closed the connection."""
        with self._lock:
            connection = self._connections.get(sock)
            if connection is None:
                return False
            connection.partial = False
            if connection.requests:  # kept alive after an answer: idle from now
                self.cap.waits(sock)
                self._set_deadline(connection, time.monotonic() + self.limits.idle_timeout)
        sock.settimeout(None)  # the deadline cuts the wait, not a timeout per read
        try:
            first = rfile.peek(1)  # type: ignore[attr-defined]
        except ssl.SSLError as error:  # the handshake, done on this first read
            if error.reason == "HTTP_REQUEST":  # OpenSSL's name for a request in clear
                self.refusals.refused(400, connection.client, "-", PLAIN_HTTP_TO_TLS)
                answer_in_clear(sock, PLAIN_HTTP_ANSWER)
            return False
        except (OSError, ValueError):
            return False
        if not first:
            return False
        with self._lock:
            connection = self._connections.get(sock)
            if connection is None:
                return False
            connection.partial = True
            if connection.requests:
                self._set_deadline(connection, time.monotonic() + self.limits.header_timeout)
        return True

    def request_in_hand(self, sock: socket.socket) -> bool:
        """The request's head is read: no deadline from here on and never evicted (reads
        and writes get ``write_timeout``). False: the guard closed the connection first
        (what was read is a truncated head: do not answer it)."""
        with self._lock:
            connection = self._connections.get(sock)
            if connection is None:
                return False
            connection.requests += 1
            connection.deadline = None
            self.cap.busy(sock)
        sock.settimeout(self.limits.write_timeout)
        return True

    def is_open(self, sock: socket.socket) -> bool:
        """False once the guard has closed the connection (its errors are not news)."""
        with self._lock:
            return sock in self._connections

    # ---------------------------------------------------------------- deadlines

    def _set_deadline(self, connection: _Connection, deadline: float) -> None:
        """(lock held)"""
        connection.deadline = deadline
        if deadline < self._wake_at:
            self._wake_at = deadline
            self._changed.notify()

    def _watch(self) -> None:
        with self._lock:
            while not self._stopped:
                now = time.monotonic()
                due = [
                    connection
                    for connection in self._connections.values()
                    if connection.deadline is not None and connection.deadline <= now
                ]
                notes = [self._cut(connection, evicted=False) for connection in due]
                self.timed_out += len(due)
                self._wake_at = min(
                    (c.deadline for c in self._connections.values() if c.deadline is not None),
                    default=math.inf,
                )
                if notes:
                    self._lock.release()  # log without holding up the server's threads
                    try:
                        self._note(notes)
                    finally:
                        self._lock.acquire()
                    continue
                self._changed.wait(None if self._wake_at == math.inf else self._wake_at - now)

    def _cut(self, connection: _Connection, evicted: bool) -> tuple[int, str, str] | None:
        """(lock held) Close ``connection``: 408 (its deadline passed) or 503 (evicted at the
        cap) when part of a head arrived, then a shutdown that wakes its thread's read. The
        socket itself is closed by that thread, after ``release``: never here, so its
        descriptor cannot be reused under a shutdown."""
        del self._connections[connection.sock]
        self.cap.busy(connection.sock)
        note = None
        if connection.partial or _bytes_waiting(connection.sock):
            refusal = EVICTED if evicted else HEAD_TIMEOUT
            note = (refusal.status, connection.client, refusal.reason)
            if not isinstance(connection.sock, ssl.SSLSocket):  # no plain answer inside TLS
                with contextlib.suppress(OSError):
                    connection.sock.send(refusal.plain(), socket.MSG_DONTWAIT)
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)
        return note

    def _note(self, notes: list[tuple[int, str, str] | None]) -> None:
        for note in notes:
            if note is not None:
                status, client, reason = note
                self.refusals.refused(status, client, "-", reason)


def _bytes_waiting(sock: socket.socket) -> bool:
    """Whether the client has sent bytes its thread has not read yet (a thread slow to
    start on a loaded machine has not marked its connection ``partial``). A TLS socket is
    peeked beneath TLS: any byte of its handshake counts."""
    try:
        return bool(socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return False


class GuardedThreadingMixIn:
    """Before ``socketserver.ThreadingMixIn`` in a server's bases: every accepted
    connection goes through ``self.guard`` (refused ones never get a thread), is released
    when its thread ends, and errors of connections the client or the guard closed are
    not logged as server errors."""

    guard: ConnectionGuard

    def process_request(self, request: socket.socket, client_address: tuple) -> None:
        if not self.guard.admit(request, client_address):
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def shutdown_request(self, request: socket.socket) -> None:
        self.guard.release(request)
        super().shutdown_request(request)  # type: ignore[misc]

    def handle_error(self, request: socket.socket, client_address: tuple) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError) or not self.guard.is_open(request):
            self.guard.log.debug("client %s left: %r", client_address[0], error)
            return
        super().handle_error(request, client_address)  # type: ignore[misc]

    def server_close(self) -> None:
        super().server_close()  # type: ignore[misc]
        self.guard.close()
