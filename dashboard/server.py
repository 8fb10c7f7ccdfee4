"""The dashboard's HTTP server: werkzeug's threaded server within ``netserve.http_guard``'s
limits.

Plain ``werkzeug.serving.make_server(..., threaded=True)`` starts a thread for every
connection, without a cap, and reads a request's head without any deadline: a client that
connects and sends nothing, or its head a byte at a time, holds a thread for ever, and N
of them hold N threads. Here every connection is admitted by a ``ConnectionGuard``
(``--max-connections``: at the cap the connection that has waited longest for its
request is closed to make room, and when every one has a request in hand the newcomer
gets 503 with Retry-After) and a request's whole head must arrive within
``--header-timeout`` (408 when part of it came). Werkzeug answers every request with
``Connection: close``, so a dashboard connection is never idle between requests: the
guard's idle timeout never applies and is not an option.

Everything after the head is werkzeug's and Dash's as before: callbacks' POSTs, assets,
HTTP basic auth (a Flask hook of the app).
"""

from __future__ import annotations

import logging
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from netserve.http_guard import ConnectionGuard, GuardedThreadingMixIn
from netserve.limits import ConnectionLimits
from netserve.tls import ServerTls, TlsServerMixIn

log = logging.getLogger("dashboard")

# A browser opens up to 6 connections to a host; 128 threads serve ~20 page loads at once.
LIMITS = ConnectionLimits(max_connections=128, header_timeout=10.0)


class GuardedRequestHandler(WSGIRequestHandler):
    """Werkzeug's handler, telling the guard where its connection stands."""

    server: DashboardServer

    def handle_one_request(self) -> None:
        if not self.server.guard.wait_for_request(self.connection, self.rfile):
            self.close_connection = True
            return
        super().handle_one_request()  # reads the head, then calls run_wsgi

    def run_wsgi(self) -> None:
        if not self.server.guard.request_in_hand(self.connection):
            self.close_connection = True  # cut mid-head: what was read is not a request
            return
        super().run_wsgi()

    def log_error(self, format: str, *args: Any) -> None:
        if self.server.guard.is_open(self.connection):  # a cut connection is no error
            super().log_error(format, *args)


class DashboardServer(TlsServerMixIn, GuardedThreadingMixIn, ThreadedWSGIServer):
    """With ``tls`` every connection is TLS (``netserve.tls``), its handshake in the
    connection's thread under the header deadline (werkzeug's own ``ssl_context`` would
    wrap the listening socket and shake hands in the accepting thread, where one silent
    client stops every accept)."""

    def __init__(
        self, host: str, port: int, app: Any, limits: ConnectionLimits, tls: ServerTls | None
    ) -> None:
        super().__init__(host, port, app, handler=GuardedRequestHandler)
        self.guard = ConnectionGuard(limits, log, "dashboard-http")
        self.tls = tls
        # werkzeug reads this for wsgi.url_scheme (https) and its SSL error lines only
        self.ssl_context = tls.context() if tls else None


def make_dashboard_server(
    host: str,
    port: int,
    app: Any,
    limits: ConnectionLimits = LIMITS,
    tls: ServerTls | None = None,
) -> DashboardServer:
    """The server for ``app`` (a WSGI app: the Dash app's Flask ``server``) on
    ``host:port`` (0: any free port), HTTPS with ``tls``; ``serve_forever`` it."""
    return DashboardServer(host, port, app, limits, tls)
